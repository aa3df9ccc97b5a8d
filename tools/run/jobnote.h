/* SPDX-License-Identifier: BSD-3-Clause */
/* What happened to a job, as one line for its Comment in Slurm (scontrol
 * show job, sacct -o Comment, squeue -o %k): where Slurm users look.
 *
 * Comment is the job owner's field, so resihp-run (the owner) may set it;
 * AdminComment needs an operator and is left alone. The user's own comment
 * (sbatch --comment) is kept in front of ours. All text is bounded and
 * printable ASCII: it comes from the ranks (node names, reasons). */
#ifndef RESIHP_TOOLS_RUN_JOBNOTE_H
#define RESIHP_TOOLS_RUN_JOBNOTE_H

#include <stddef.h>

/* The most the Comment holds: the user's part, then ours. */
#define RESIHP__JOBNOTE_MAX 480
#define RESIHP__JOBNOTE_USER_MAX 160

typedef struct {
  const char *state; /* "running", or the outcome: "completed", "LOST ..." */
  long step;         /* the step reached */
  int failures;      /* replicas that failed (swaps not counted) */
  int swaps;         /* slow replicas swapped for spares */
  int replacements;  /* replacements launched */
  int dropped;       /* replicas the job goes on without */
  int nodes_bad;     /* nodes marked bad */
  const char *last;  /* the last failure, "" or NULL: none */
} resihp__jobnote_t;

/* The Comment for n after the user's own text user (may be NULL or ""),
 * into out (len bytes, always terminated): "USER | resihp: ..." or
 * "resihp: ...". Returns its length. */
size_t resihp__jobnote_text(const char *user, const resihp__jobnote_t *n,
                            char *out, size_t len);

/* A Comment as squeue shows it (%k): the user's own part (before any
 * "resihp:" of ours; "(null)" is none) into user (ulen bytes), and the
 * failures ours counted (0 when none) into *failures, for a coordinator
 * that takes over and counts on. */
void resihp__jobnote_parse(const char *comment, char *user, size_t ulen,
                           int *failures);

#endif
