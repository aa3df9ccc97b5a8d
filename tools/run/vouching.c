/* SPDX-License-Identifier: BSD-3-Clause */
/* resihp-run: a standby's early takeover on the replicas' word
 * (control/vouch.h) - the standby's side. While it follows the primary's
 * feed it also answers its own coordinator address (the replicas dial it
 * when they lose the primary): a leader's HELLO again=1 with its own
 * credential is a vouch, answered VOUCHED term=T+1 and held; the standby
 * takes over once enough members vouched and the primary's lease ran out,
 * lets them go (RELEASED) when the primary's feed speaks again, and
 * closes every held link at its takeover (they reconnect, to its
 * coordinator). Anything else that dials it before then (a joiner, a
 * spare, a rank asking for its leader) is closed: the primary is its
 * place. Single-threaded: a step at a time from the follow loop. */
#include "config.h"

#include "../../libresihp/control/lobby.h"
#include "../../libresihp/control/vouch.h"
#include "run.h"

#include <resihp.h>

#include <poll.h>
#include <stdlib.h>
#include <string.h>

#define HS_TIMEOUT_MS 3000
#define HELLO_MS 2000
/* a leader's HELLO line: its addresses, ids and credential */
#define HELLO_LINE_MAX 4096
/* the feed counts as following while it spoke within this */
#define FOLLOWING_MS (3 * RESIHP__FEED_BEAT_MS)

static struct {
  resihp__wire_hs_t *hs;
  resihp__lobby_t *lobby;
  resihp__wire_t *held; /* the vouchers' links, answered VOUCHED */
  int nheld, capheld;
  resihp__vouch_t *book; /* against the record held when the first came */
  int64_t heard_ms;      /* the feed's last line */
  int refused;           /* vouches refused (said once) */
} V;

int vouching_start(const uint8_t *secret, size_t slen) {
  int pending = g.R + 8;
  int rc = resihp__wire_hs_create(secret, slen, "coord", pending,
                                  HS_TIMEOUT_MS, &V.hs);
  if (!rc)
    rc = resihp__lobby_create(pending, HELLO_MS, HELLO_LINE_MAX, &V.lobby);
  if (rc)
    say("warning: the standby cannot hear the replicas (%s): it takes over "
        "only when Slurm declares the primary's node DOWN",
        resihp_strerror(rc));
  return rc;
}

static void close_held(const char *line) {
  for (int i = 0; i < V.nheld; i++) {
    if (line)
      resihp__wire_send(&V.held[i], line, resihp__now_ms() + 500);
    resihp__wire_free(&V.held[i]);
  }
  V.nheld = 0;
}

void vouching_heard(void) {
  V.heard_ms = resihp__now_ms();
  if (V.nheld || V.book) {
    say("the primary's feed speaks again: %d replica(s) that vouched are "
        "let go (back to the primary)",
        V.nheld);
    close_held("RELEASED");
    resihp__vouch_destroy(V.book);
    V.book = NULL;
  }
}

/* One authenticated connection's first line. */
static void on_line(resihp__wire_t *w, const char *line, const char *rec,
                    size_t len) {
  int r;
  char cred[RESIHP__VOUCH_CRED_HEX + 1];
  uint32_t term;
  if (resihp__vouch_parse(line, &r, cred, &term)) {
    resihp__wire_free(w); /* not a vouch: the primary is its place */
    return;
  }
  if (resihp__now_ms() - V.heard_ms < FOLLOWING_MS) {
    /* the primary speaks to us: no takeover, back to it */
    resihp__wire_send(w, "RELEASED", resihp__now_ms() + 500);
    resihp__wire_free(w);
    return;
  }
  const char *coord = NULL;
  size_t clen = 0;
  if (!V.book && rec && !record_coord_part(rec, len, &coord, &clen) &&
      resihp__vouch_create(coord, clen, g.R, &V.book))
    V.book = NULL;
  int rc = V.book ? resihp__vouch_add(V.book, r, cred, resihp__now_ms())
                  : RESIHP_ENOENT;
  if (rc < 0 || term > resihp__vouch_term(V.book)) {
    if (!V.refused++)
      say("a vouch for replica %d refused (%s): it is no member of the "
          "last record, or not its credential, or of a newer term",
          r, rc < 0 ? resihp_strerror(rc) : "term");
    resihp__wire_free(w);
    return;
  }
  if (V.nheld == V.capheld) {
    int n = V.capheld ? 2 * V.capheld : 8;
    resihp__wire_t *x = realloc(V.held, sizeof(*x) * (size_t)n);
    if (!x) {
      resihp__wire_free(w);
      return;
    }
    V.held = x;
    V.capheld = n;
  }
  char ans[64];
  snprintf(ans, sizeof(ans), "VOUCHED term=%u",
           (unsigned)resihp__vouch_term(V.book) + 1);
  if (resihp__wire_send(w, ans, resihp__now_ms() + 500)) {
    resihp__wire_free(w);
    return;
  }
  V.held[V.nheld++] = *w;
  if (rc == 1)
    say("replica %d says it lost the primary (%d of %d members; %d "
        "needed)",
        r, resihp__vouch_count(V.book), resihp__vouch_members(V.book),
        resihp__vouch_need(resihp__vouch_members(V.book)));
}

void vouching_step(int wait_ms, const char *rec, size_t len) {
  if (!V.hs)
    return;
  const resihp__wire_listener_t *lis = g.co.listener;
  int nl = lis ? lis->n : 0;
  struct pollfd *p = calloc((size_t)(nl + 1 + g.R + 8), sizeof(*p));
  if (!p)
    return;
  for (int i = 0; i < nl; i++)
    p[i] = (struct pollfd){lis->fds[i], POLLIN, 0};
  p[nl] = (struct pollfd){resihp__wire_hs_fd(V.hs), POLLIN, 0};
  int np = nl + 1 + resihp__lobby_fds(V.lobby, p + nl + 1);
  int ms = resihp__lobby_wait_ms(V.lobby,
                                 resihp__wire_hs_wait_ms(V.hs, wait_ms));
  poll(p, (nfds_t)np, ms < 0 ? 0 : ms);
  for (int i = 0; i < nl; i++)
    if (p[i].revents)
      resihp__wire_hs_accept(V.hs, lis->fds[i]);
  free(p);
  resihp__wire_t nw;
  resihp__wire_init(&nw, -1);
  while (resihp__wire_hs_next(V.hs, &nw) == 1) {
    resihp__lobby_add(V.lobby, &nw);
    resihp__wire_init(&nw, -1);
  }
  char *line = malloc(HELLO_LINE_MAX + 1);
  while (line && resihp__lobby_next(V.lobby, &nw, line, HELLO_LINE_MAX + 1) ==
                     1) {
    on_line(&nw, line, rec, len);
    resihp__wire_init(&nw, -1);
  }
  free(line);
}

int vouching_ready(int64_t lost_ms, int *count, int *members) {
  *count = V.book ? resihp__vouch_count(V.book) : 0;
  *members = V.book ? resihp__vouch_members(V.book) : 0;
  if (!resihp__vouch_ready(V.book, lost_ms, resihp__now_ms(),
                           resihp__vouch_wait_ms(g.co.silence_ms)) ||
      !(g.vouchers = calloc((size_t)g.R, 1)))
    return 0;
  for (int r = 0; r < g.R; r++)
    g.vouchers[r] = (char)resihp__vouch_has(V.book, r);
  return 1;
}

void vouching_end(void) {
  close_held(NULL); /* they come back to the coordinator here */
  resihp__vouch_destroy(V.book);
  V.book = NULL;
  resihp__lobby_destroy(V.lobby);
  resihp__wire_hs_destroy(V.hs);
  V.lobby = NULL;
  V.hs = NULL;
  free(V.held);
  V.held = NULL;
  V.capheld = 0;
}
