/* SPDX-License-Identifier: BSD-3-Clause */
/* Fuzz target of resihp-run's command templates (--kill-node-cmd, from the
 * user) expanded with node names (from the ranks), libFuzzer-style, with
 * the standalone driver of fuzz_driver.h for `make check`. An input is
 * TEMPLATE, then optionally a NUL byte and a NODE name (default "n1").
 *
 * Invariants beyond "does not crash": a refused template leaves nothing
 * behind and says why in a terminated message; an accepted one has 1..64
 * non-empty words without blanks that are the template's non-blank bytes
 * in order; expanding it for any node gives exactly as many arguments,
 * each of the length that replacing every %n by the node and every %% by
 * '%' gives, whatever the node holds (blanks, ';', '$(...)'). */
#include "config.h"

#include "fuzz_driver.h"

#include "../../tools/run/cmd.h"

#include <resihp/error.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_blank(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n';
}

/* The length of word w expanded for a node of length nl; *nodes gets the
 * number of %n in it. */
static size_t expanded_len(const char *w, size_t nl, int *nodes) {
  size_t n = 0;
  *nodes = 0;
  for (const char *s = w; *s; s++, n++)
    if (s[0] == '%') {
      if (s[1] != 'n' && s[1] != '%')
        abort(); /* the parser let a bad '%' through */
      if (s[1] == 'n') {
        n += nl - 1;
        ++*nodes;
      }
      s++;
    }
  return n;
}

static void check_words(const char *tmpl, const resihp__cmd_t *c,
                        const char *node) {
  if (c->n < 1 || c->n > RESIHP__CMD_MAX_WORDS || c->words[c->n])
    abort();
  /* the words are the template's non-blank bytes, in order */
  const char *t = tmpl;
  for (int i = 0; i < c->n; i++) {
    const char *w = c->words[i];
    if (!*w)
      abort();
    while (is_blank(*t))
      t++;
    size_t l = strlen(w);
    if (strncmp(t, w, l) || (t[l] && !is_blank(t[l])))
      abort();
    t += l;
  }
  while (is_blank(*t))
    t++;
  if (*t)
    abort();
  char **argv = resihp__cmd_expand(c, node);
  if (!argv)
    return; /* out of memory */
  int n = 0;
  while (argv[n])
    n++;
  if (n != c->n)
    abort(); /* a node name never adds or removes an argument */
  for (int i = 0; i < n; i++) {
    int nodes;
    if (strlen(argv[i]) != expanded_len(c->words[i], strlen(node), &nodes))
      abort();
    if (nodes && *node && !strstr(argv[i], node))
      abort();
  }
  resihp__cmd_argv_free(argv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *in = resihp__fuzz_cstr(data, size);
  if (!in)
    return 0;
  /* TEMPLATE [NUL NODE] */
  size_t tl = strlen(in);
  const char *node = tl < size ? in + tl + 1 : "n1";
  resihp__cmd_t c;
  memset(&c, 0x5a, sizeof(c));
  char err[300];
  memset(err, 'x', sizeof(err));
  int rc = resihp__cmd_parse(in, &c, err, sizeof(err));
  if (rc) {
    if (rc != RESIHP_EINVAL && rc != RESIHP_ENOMEM)
      abort();
    if (c.words || c.n)
      abort(); /* a refused template leaves nothing */
    if (rc == RESIHP_EINVAL && !memchr(err, '\0', sizeof(err)))
      abort();
  } else {
    check_words(in, &c, node);
    char path[4096];
    int e = resihp__prog_check(c.words[0], path, sizeof(path));
    if (e < 0 || !memchr(path, '\0', sizeof(path)))
      abort();
  }
  resihp__cmd_free(&c);
  resihp__cmd_free(&c); /* idempotent */
  free(in);
  return 0;
}

#ifndef RESIHP_FUZZ_LIBFUZZER

/* Inputs biased towards the grammar: words, blanks, escapes, shell
 * syntax, junk bytes; now and then a NUL and a node name after it, or a
 * great many words. */
static size_t fuzz_generate(uint8_t *buf, size_t cap) {
  static const char *const atoms[] = {
      "scancel", "env",  "LAB=/tmp/x", "killnode", "%n",        "%%",
      "%",       "%x",   " ",          "\t",       "\n",        "  ",
      ";",       "$(",   ")",          "`",        "'",         "\"",
      "n1",      "a%nb", "%n%n",       "%%n",      "/bin/true", "true",
      "--",      "=",    "*",          "?",        "\\"};
  size_t n = resihp__fuzz_pad_long(
      buf,
      resihp__fuzz_atoms(buf, 0, cap, atoms, sizeof(atoms) / sizeof(atoms[0]),
                         resihp__fuzz_rng() % 16, 7),
      cap, 80);
  if (n && resihp__fuzz_rng() % 4 == 0)
    buf[resihp__fuzz_rng() % n] = 0; /* TEMPLATE NUL NODE */
  if (resihp__fuzz_rng() % 80 == 0)
    for (size_t i = 1; i < n; i += 2)
      buf[i] = ' ';
  return n;
}

int main(int argc, char **argv) {
  return resihp__fuzz_main(argc, argv, "fuzz_cmd", "corpus-cmd", 8192,
                           fuzz_generate, 20000);
}
#endif
