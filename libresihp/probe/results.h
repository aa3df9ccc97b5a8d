/* SPDX-License-Identifier: BSD-3-Clause */
/* Reader of the probe results file (format resihp-probe-v1, see
 * resihp-probe(8)) that the plugin hands to a step's tasks as
 * RESIHP_PROBE_RESULTS: a "start" block written once, then one "periodic"
 * block appended per periodic probe run, blocks separated by a blank line.
 *
 * Readers live in the job's processes (the rank library, the spare agent),
 * so this file is part of libresihp-internal, not of the plugin's probe
 * library. A watcher remembers how far it has read: polling an unchanged
 * file costs one stat(2), which is why the ranks can afford it at every
 * step boundary. The writer appends a block with one write(2); an
 * unterminated last block is left for the next poll.
 */
#ifndef RESIHP_PROBE_RESULTS_H
#define RESIHP_PROBE_RESULTS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
  char path[512];
  off_t off; /* bytes of whole blocks already returned */
  char *pending; /* whole blocks read but not returned yet */
  size_t npending, ppos;
} resihp__probe_watch_t;

typedef struct {
  char kind[16];     /* "start", "periodic", "manual" */
  int healthy;       /* 1, 0; -1 when the block has no healthy= line */
  char failed[64];   /* "mem:disk" */
  char summary[400]; /* "mem: forced failure; disk: ..." (failed checks) */
} resihp__probe_block_t;

/* Start watching path from its beginning. 0 or RESIHP_EINVAL (no path). */
int resihp__probe_watch_init(resihp__probe_watch_t *w, const char *path);
void resihp__probe_watch_free(resihp__probe_watch_t *w);

/* The next whole block not returned yet: 1 (filled in), 0 when there is
 * none (yet), a negative RESIHP_E* code when the file cannot be read (it
 * may be gone: the plugin removes it when the step ends). */
int resihp__probe_watch_next(resihp__probe_watch_t *w,
                             resihp__probe_block_t *b);

#endif
