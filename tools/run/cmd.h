/* SPDX-License-Identifier: BSD-3-Clause */
/* Commands that resihp-run runs for the user, without a shell.
 *
 * A command template (--kill-node-cmd) is split at blanks (spaces, tabs)
 * into words once, when the option is read: there is no quoting, no
 * variable, no redirection, nothing a shell would interpret. In each word
 * %n stands for the node name and %% for a '%'; a node name is substituted
 * inside its word, so whatever characters it holds it stays exactly one
 * argument of the program. Anything needing a shell goes in a script the
 * template names. */
#ifndef RESIHP_TOOLS_RUN_CMD_H
#define RESIHP_TOOLS_RUN_CMD_H

#include <stddef.h>

/* At most this many words and this many bytes in a template. */
#define RESIHP__CMD_MAX_WORDS 64
#define RESIHP__CMD_MAX_LEN 4096

typedef struct {
  char **words; /* NULL-terminated; owned */
  int n;
} resihp__cmd_t;

/* Split text into *out. 0, or RESIHP_EINVAL with a sentence in err (empty
 * command, too long, too many words, a '%' not followed by 'n' or '%'),
 * or RESIHP_ENOMEM. On error *out is empty. */
int resihp__cmd_parse(const char *text, resihp__cmd_t *out, char *err,
                      size_t errlen);
/* The argv to run for node: a NULL-terminated array of n words, each a
 * fresh string, %n and %% replaced. NULL if out of memory. Free it with
 * resihp__cmd_argv_free. */
char **resihp__cmd_expand(const resihp__cmd_t *c, const char *node);
void resihp__cmd_argv_free(char **argv);
void resihp__cmd_free(resihp__cmd_t *c);

/* Can this program be started (as execvp would find it: a name without
 * '/' is looked up in PATH)? 0, or the errno that exec would meet
 * (ENOENT, EACCES, EISDIR...). The full path found goes into path. */
int resihp__prog_check(const char *prog, char *path, size_t pathlen);

#endif
