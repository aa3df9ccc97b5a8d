/* SPDX-License-Identifier: BSD-3-Clause */
/* Lines owed to every member at a step boundary, paced over poll rounds.
 *
 * A boundary sends each member its GO (the change of the member list, or
 * the whole list to a member that holds none: O(N) bytes each) and its
 * START: 2N lines, and N whole lists when a whole job joins at once (2.2
 * GB at 10,000 replicas). Sent in the round that made them they held the
 * loop for seconds, next to the keeper's hang bound (resihp-run kills a
 * coordinator that does not beat for 5 s). So the state is mirrored, each
 * member is marked as owed its lines (rep_t.owed) and put in a queue, and
 * each poll round sends at most PACE_LINES lines and PACE_BYTES bytes of
 * it (resihp__coord_pace_round starts a round's budget, every
 * resihp__coord_pump in the round spends from it; the loop does not sleep
 * while some are owed).
 * The lines are built once (GO) or from the mirrored state (START), so
 * they need no mirror of their own.
 *
 * Order. A member's lines leave in the order they were owed (its GO, then
 * its START). Any other line to a member that is still owed some (HOLD,
 * REASSIGN, DONE, an answer said again) first sends what it is owed
 * (resihp__coord_pay), so that it never overtakes them; a GO or START
 * said again directly (coord_protocol.c) clears what it replaces. A new
 * boundary drops what the last one still owed (its members are those
 * that reached it, so they got their lines; the others failed).
 */
#include "config.h"

#include "coord_internal.h"

#include <string.h>

/* What one poll round sends at most. */
#define PACE_LINES 2048
#define PACE_BYTES (16L << 20)

void resihp__coord_pace_reset(resihp__coord_t *c) {
  for (long i = c->pace_head; i < c->pace_n; i++)
    c->reps[c->pace_q[i] >> 3].owed = 0;
  c->pace_head = c->pace_n = 0;
}

void resihp__coord_owe(resihp__coord_t *c, int r, int what) {
  if (c->pace_n >= 2L * c->R) /* (a GO and a START each at most) */
    return;
  c->reps[r].owed |= what;
  c->pace_q[c->pace_n++] = r << 3 | what;
}

/* Member r's owed line `what`, now. Returns the bytes sent. */
static long send_owed(resihp__coord_t *c, int r, int what) {
  rep_t *p = &c->reps[r];
  if (!(p->owed & what))
    return 0; /* sent directly meanwhile */
  p->owed &= ~what;
  if (p->conn < 0 || !resihp__coord_is_member(c, r))
    return 0;
  long len = 0;
  c->paying++;
  if (what == OWE_START) {
    resihp__coord_again(c, resihp__coord_send_start(c, r));
    len = 256; /* (a few hundred bytes) */
  } else if (what == OWE_GO_WHOLE && !c->go_whole.s) {
    /* (no line built: no memory then) the whole list is always right */
    resihp__coord_again(c, resihp__coord_send_go_whole(c, r));
  } else {
    int whole = what == OWE_GO_WHOLE;
    const resihp__wire_buf_t *b = whole ? &c->go_whole : &c->go_line;
    if (c->go_renew) /* it holds this epoch's list from now on */
      p->list_epoch = c->epoch;
    resihp__coord_again(
        c, resihp__coord_send_buf_hashed(
               c, r, b, whole ? c->go_whole_digest : c->go_line_digest));
    len = (long)b->len;
  }
  c->paying--;
  if (p->conn >= 0)
    resihp__coord_flush_conn(c, p->conn);
  return len;
}

void resihp__coord_pace_round(resihp__coord_t *c) {
  c->pace_lines = PACE_LINES;
  c->pace_bytes = PACE_BYTES;
}

int resihp__coord_pump(resihp__coord_t *c) {
  while (c->pace_head < c->pace_n && c->pace_lines > 0 && c->pace_bytes > 0) {
    int e = c->pace_q[c->pace_head++];
    c->pace_lines--;
    c->pace_bytes -= send_owed(c, e >> 3, e & 7);
  }
  if (c->pace_head == c->pace_n)
    c->pace_head = c->pace_n = 0;
  return c->pace_n > 0;
}

void resihp__coord_pay(resihp__coord_t *c, int r) {
  if (c->paying || !c->reps[r].owed)
    return;
  /* its GO before its START, as the queue has them */
  send_owed(c, r, OWE_GO_WHOLE);
  send_owed(c, r, OWE_GO_LINE);
  send_owed(c, r, OWE_START);
}
