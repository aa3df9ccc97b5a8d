/* SPDX-License-Identifier: BSD-3-Clause */
/* Command templates run without a shell, and the check that a program can
 * be started (see cmd.h). */
#include "config.h"

#include "cmd.h"

#include <resihp/error.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int blank(char ch) {
  return ch == ' ' || ch == '\t' || ch == '\n';
}

void resihp__cmd_free(resihp__cmd_t *c) {
  if (!c)
    return;
  for (int i = 0; c->words && i < c->n; i++)
    free(c->words[i]);
  free(c->words);
  c->words = NULL;
  c->n = 0;
}

static int refuse(char *err, size_t errlen, const char *why) {
  if (err && errlen)
    snprintf(err, errlen,
             "bad command template: %s (words separated by blanks, run "
             "without a shell; %%n is the node name, %%%% a '%%'; put anything "
             "else in a script)",
             why);
  return RESIHP_EINVAL;
}

int resihp__cmd_parse(const char *text, resihp__cmd_t *out, char *err,
                      size_t errlen) {
  out->words = NULL;
  out->n = 0;
  if (!text)
    return refuse(err, errlen, "no command");
  size_t len = strnlen(text, RESIHP__CMD_MAX_LEN + 1);
  if (len > RESIHP__CMD_MAX_LEN)
    return refuse(err, errlen, "longer than 4096 bytes");
  for (size_t i = 0; i < len; i++)
    if (text[i] == '%') {
      if (text[i + 1] != 'n' && text[i + 1] != '%')
        return refuse(err, errlen, "'%' must be followed by 'n' or '%'");
      i++;
    }
  char **w = calloc(RESIHP__CMD_MAX_WORDS + 1, sizeof(char *));
  if (!w)
    return RESIHP_ENOMEM;
  int n = 0;
  const char *p = text;
  for (;;) {
    while (blank(*p))
      p++;
    if (!*p)
      break;
    size_t l = 0;
    while (p[l] && !blank(p[l]))
      l++;
    if (n == RESIHP__CMD_MAX_WORDS) {
      out->words = w;
      out->n = n;
      resihp__cmd_free(out);
      return refuse(err, errlen, "more than 64 words");
    }
    if (!(w[n] = strndup(p, l))) {
      out->words = w;
      out->n = n;
      resihp__cmd_free(out);
      return RESIHP_ENOMEM;
    }
    n++;
    p += l;
  }
  if (n == 0) {
    free(w);
    return refuse(err, errlen, "empty command");
  }
  out->words = w;
  out->n = n;
  return 0;
}

void resihp__cmd_argv_free(char **argv) {
  for (int i = 0; argv && argv[i]; i++)
    free(argv[i]);
  free(argv);
}

/* One word with %n and %% replaced. */
static char *expand_word(const char *w, const char *node) {
  size_t nl = strlen(node), need = 1;
  for (const char *s = w; *s; s++) {
    if (s[0] == '%' && s[1]) {
      need += s[1] == 'n' ? nl : 1;
      s++;
    } else {
      need++;
    }
  }
  char *out = malloc(need), *o = out;
  if (!out)
    return NULL;
  for (const char *s = w; *s; s++) {
    if (s[0] == '%' && s[1] == 'n') {
      memcpy(o, node, nl);
      o += nl;
      s++;
    } else if (s[0] == '%' && s[1] == '%') {
      *o++ = '%';
      s++;
    } else {
      *o++ = *s;
    }
  }
  *o = '\0';
  return out;
}

char **resihp__cmd_expand(const resihp__cmd_t *c, const char *node) {
  char **argv = calloc((size_t)c->n + 1, sizeof(char *));
  if (!argv)
    return NULL;
  for (int i = 0; i < c->n; i++)
    if (!(argv[i] = expand_word(c->words[i], node))) {
      resihp__cmd_argv_free(argv);
      return NULL;
    }
  return argv;
}

/* 0 if path names a file this user may execute, else the errno exec would
 * meet. */
static int executable(const char *path) {
  struct stat st;
  if (stat(path, &st))
    return errno;
  if (S_ISDIR(st.st_mode))
    return EISDIR;
  if (!S_ISREG(st.st_mode) || access(path, X_OK))
    return EACCES;
  return 0;
}

int resihp__prog_check(const char *prog, char *path, size_t pathlen) {
  if (!prog || !*prog)
    return ENOENT;
  if (strchr(prog, '/')) {
    snprintf(path, pathlen, "%s", prog);
    return executable(prog);
  }
  /* execvp's search: the first executable match wins; if none, EACCES
   * when some match was not executable, else ENOENT. */
  const char *env = getenv("PATH");
  const char *dirs = env && *env ? env : "/bin:/usr/bin";
  int err = ENOENT;
  snprintf(path, pathlen, "%s", prog);
  while (*dirs) {
    size_t l = strcspn(dirs, ":");
    char cand[4096];
    int w = snprintf(cand, sizeof(cand), "%.*s%s%s", (int)l, dirs, l ? "/" : "",
                     prog);
    dirs += l + (dirs[l] == ':');
    if (w < 0 || (size_t)w >= sizeof(cand))
      continue;
    int e = executable(cand);
    if (!e) {
      snprintf(path, pathlen, "%s", cand);
      return 0;
    }
    if (e != ENOENT && e != ENOTDIR)
      err = e;
  }
  return err;
}
