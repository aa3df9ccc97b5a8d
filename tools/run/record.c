/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: failover (keeper.h) - the launcher's own state in the
 * keeper's record, and a primary restored from it. */
#include "config.h"

#include "run.h"

#include <resihp.h>

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int64_t realtime_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Every field a primary that takes over needs to go on launching,
 * replacing and summing up: the nodes not in their first state, every
 * replica. */
void launcher_state(resihp__wire_buf_t *b) {
  resihp__wire_buf_printf(
      b, "L %d %d %d %d %d %ld %ld %ld %d %ld %d %d %d %d %" PRId64 " %ld %d",
      g.nbad, g.nreplacements, g.stopping, g.program_failed, g.aborted,
      g.saved_step, g.kept[0], g.kept[1], g.save_cancelled, g.saving_said,
      g.shape_checked, g.resume_mismatch, (int)got_signal, (int)nsignals, g.t0,
      g.progress_step, g.ninj);
  for (int i = 0; i < g.ninj; i++)
    resihp__wire_buf_printf(b, " %d", g.fired[i]);
  resihp__wire_buf_printf(b, "\n");
  /* where this primary was (a standby that takes over is elsewhere: the
   * sruns are not its own), and the standby it started */
  resihp__wire_buf_printf(b, "H %s %ld %d %d %" PRId64 " %" PRId64 " %s %d\n",
                          g.coord_ep, (long)g.standby_pid, g.standby_node,
                          g.standby_tries, resihp__now_ms(), realtime_ms(),
                          g.standby_token[0] ? g.standby_token : "-",
                          g.lease_on);
  for (int i = 0; i < g.nnodes; i++) {
    node_t *n = &g.nodes[i];
    if (n->bad || n->owner >= 0 || n->check > 0)
      resihp__wire_buf_printf(b, "N %d %d %d %ld %ld\n", i, n->bad, n->owner,
                              (long)n->check, n->check_regs);
  }
  for (int r = 0; r < g.R; r++) {
    replica_t *p = &g.reps[r];
    resihp__wire_buf_printf(
        b, "P %d %ld %" PRId64 " %" PRId64 " %d %d %d %d %d %d %d %d", r,
        (long)p->pid, p->t_launch, p->kill_at, p->connected, p->relaunch,
        p->tries, p->launches, p->given_up, p->diagnosing, p->early_status,
        p->nnodes);
    for (int i = 0; i < p->nnodes; i++)
      resihp__wire_buf_printf(b, " %d", p->nodes[i]);
    resihp__wire_buf_printf(b, "\n");
    /* a failed step's nodes, lost ranks and shrink wait: a launcher that
     * takes over before the relaunch goes on with the shrink */
    char sl[64 * 12 + 96];
    if (p->sh.nwas || p->sh.wait || p->sh.lost || p->sh.killed) {
      if (resihp__run_shrink_format(r, &p->sh, sl, sizeof(sl)) < 0)
        b->err = RESIHP_EINVAL; /* (never: the line fits) */
      else
        resihp__wire_buf_printf(b, "%s", sl);
    }
  }
}

/* The record: "LAUNCHER <bytes>\n", the launcher's state, then the
 * coordinator's. */
void on_mirror(void *ud, const char *snap, size_t len) {
  (void)ud;
  if (!g.keeper)
    return;
  resihp__wire_buf_t b;
  resihp__wire_buf_init(&b);
  launcher_state(&b);
  char head[64];
  int hl = snprintf(head, sizeof(head), "LAUNCHER %zu\n", b.len);
  char *rec = b.err ? NULL : malloc((size_t)hl + b.len + len);
  if (rec) {
    memcpy(rec, head, (size_t)hl);
    memcpy(rec + hl, b.s, b.len);
    memcpy(rec + hl + b.len, snap, len);
    if (!resihp__keeper_record(g.keeper, rec, (size_t)hl + b.len + len))
      g.ldirty = 0;
    resihp__feed_put(g.feed, rec, (size_t)hl + b.len + len);
    free(rec);
  }
  resihp__wire_buf_free(&b);
}

/* The launcher's state from a record; *coord, *clen: the coordinator's
 * part. The record is ours (the keeper's pipe), still every index is
 * checked. */
int record_coord_part(const char *rec, size_t len, const char **coord,
                      size_t *clen) {
  size_t ll = 0;
  int hl = 0;
  if (!rec || !memchr(rec, '\n', len) ||
      sscanf(rec, "LAUNCHER %zu\n%n", &ll, &hl) != 1 || hl <= 0 ||
      ll > len - (size_t)hl)
    return RESIHP_EPROTO;
  *coord = rec + hl + ll;
  *clen = len - (size_t)hl - ll;
  return 0;
}

int restore_launcher(const char *rec, size_t len, const char **coord,
                     size_t *clen) {
  if (record_coord_part(rec, len, coord, clen))
    return RESIHP_EPROTO;
  /* the launcher's part: after the header line, up to the coordinator's */
  const char *from = memchr(rec, '\n', len) + 1;
  char *t = strndup(from, (size_t)(*coord - from));
  if (!t)
    return RESIHP_ENOMEM;
  for (int i = 0; i < g.nnodes; i++) {
    g.nodes[i].bad = 0;
    g.nodes[i].owner = -1;
    g.nodes[i].check = 0;
  }
  for (int r = 0; r < g.R; r++)
    memset(&g.reps[r].sh, 0, sizeof(g.reps[r].sh));
  int rc = 0;
  char *save = NULL;
  for (char *l = strtok_r(t, "\n", &save); l && !rc;
       l = strtok_r(NULL, "\n", &save)) {
    int n = 0, a[12];
    long v[4];
    int64_t w[2];
    if (l[0] == 'L') {
      int sig = 0, nsig = 0, ninj = 0;
      if (sscanf(l,
                 "L %d %d %d %d %d %ld %ld %ld %d %ld %d %d %d %d %" SCNd64
                 " %ld %d%n",
                 &g.nbad, &g.nreplacements, &g.stopping, &g.program_failed,
                 &g.aborted, &g.saved_step, &g.kept[0], &g.kept[1],
                 &g.save_cancelled, &g.saving_said, &g.shape_checked,
                 &g.resume_mismatch, &sig, &nsig, &g.t0, &g.progress_step,
                 &ninj, &n) != 17 ||
          ninj != g.ninj) {
        rc = RESIHP_EPROTO;
        break;
      }
      if (nsig > (int)nsignals) { /* signals the old primary had seen */
        got_signal = sig;
        nsignals = nsig;
      }
      char *q = l + n;
      for (int i = 0; i < g.ninj; i++)
        g.fired[i] = (int)strtol(q, &q, 10);
    } else if (l[0] == 'H') {
      char ep[300], tok[40];
      a[2] = 0;
      if (sscanf(l, "H %299s %ld %d %d %" SCNd64 " %" SCNd64 " %39s %d", ep,
                 &v[0], &a[0], &a[1], &w[0], &w[1], tok, &a[2]) < 7 ||
          a[0] < -1 || a[0] >= g.nnodes ||
          (strcmp(tok, "-") && strspn(tok, "0123456789abcdef") != 32)) {
        rc = RESIHP_EPROTO;
        break;
      }
      g.took_over = strcmp(ep, g.coord_ep) != 0;
      /* the old host's monotonic clock to this one's, through the wall
       * clock (the nodes' clocks are kept in step, NTP) */
      g.clock_delta = (resihp__now_ms() - realtime_ms()) - (w[0] - w[1]);
      g.standby_pid = (pid_t)v[0];
      g.lease_on |= a[2] != 0;
      g.standby_node = a[0];
      g.standby_tries = a[1];
      snprintf(g.standby_token, sizeof(g.standby_token), "%s",
               strcmp(tok, "-") ? tok : "");
    } else if (l[0] == 'N') {
      if (sscanf(l, "N %d %d %d %ld %ld", &a[0], &a[1], &a[2], &v[0], &v[1]) !=
              5 ||
          a[0] < 0 || a[0] >= g.nnodes || a[2] < -1 || a[2] >= g.R) {
        rc = RESIHP_EPROTO;
        break;
      }
      node_t *nd = &g.nodes[a[0]];
      nd->bad = a[1];
      nd->owner = a[2];
      nd->check = (pid_t)v[0];
      nd->check_regs = v[1];
    } else if (l[0] == 'S') {
      resihp__run_shrink_t sh;
      if (resihp__run_shrink_parse(l, g.R, g.nnodes, &a[0], &sh)) {
        rc = RESIHP_EPROTO;
        break;
      }
      g.reps[a[0]].sh = sh;
    } else if (l[0] == 'P') {
      if (sscanf(l,
                 "P %d %ld %" SCNd64 " %" SCNd64 " %d %d %d %d %d %d %d %d%n",
                 &a[0], &v[0], &w[0], &w[1], &a[1], &a[2], &a[3], &a[4], &a[5],
                 &a[6], &a[7], &a[8], &n) != 12 ||
          a[0] < 0 || a[0] >= g.R || a[8] < 0 || a[8] > 64) {
        rc = RESIHP_EPROTO;
        break;
      }
      replica_t *p = &g.reps[a[0]];
      p->pid = (pid_t)v[0];
      p->t_launch = w[0];
      p->kill_at = w[1];
      p->connected = a[1];
      p->relaunch = a[2];
      p->tries = a[3];
      p->launches = a[4];
      p->given_up = a[5];
      p->diagnosing = a[6];
      p->early_status = a[7];
      p->nnodes = a[8];
      char *q = l + n;
      for (int i = 0; i < p->nnodes; i++) {
        long x = strtol(q, &q, 10);
        p->nodes[i] = x >= 0 && x < g.nnodes ? (int)x : 0;
      }
    }
  }
  free(t);
  if (!rc && g.took_over) {
    /* the old primary's sruns ran on its node, which is lost: their steps
     * run on without them (a failed one is cancelled by its id) */
    g.t0 += g.clock_delta;
    for (int r = 0; r < g.R; r++) {
      if (g.reps[r].t_launch)
        g.reps[r].t_launch += g.clock_delta;
      if (g.reps[r].sh.wait) /* (asked again at once: poll 0) */
        g.reps[r].sh.wait += g.clock_delta;
      g.reps[r].pid = 0;
      g.reps[r].gate = -1;
      g.reps[r].kill_at = 0;
    }
    for (int i = 0; i < g.nnodes; i++) {
      g.nodes[i].check = 0;
      g.nodes[i].gate = -1;
    }
    g.standby_pid = 0;
    g.standby_tries = 0;
  }
  return rc;
}

/* A primary that takes over: the ledger's complete lines (a line cut by
 * the death of the one before is removed; the coordinator writes what is
 * missing). */
long ledger_cut(FILE *f) {
  long lines = 0, keep = 0, pos = 0;
  int ch;
  rewind(f);
  while ((ch = getc(f)) != EOF) {
    pos++;
    if (ch == '\n') {
      lines++;
      keep = pos;
    }
  }
  fflush(f);
  if (ftruncate(fileno(f), keep) == 0)
    fseek(f, keep, SEEK_SET);
  return lines;
}
