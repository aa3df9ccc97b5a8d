/* SPDX-License-Identifier: BSD-3-Clause */
/* Authenticated connections waiting for their first line (a standby's
 * hello, a rank's SUB, a catch-up source's offer).
 *
 * Holding the secret does not entitle a connection to its server's time:
 * one that authenticates and then says nothing must not hold a server
 * that reads each newcomer's first line in turn (2 s a connection on the
 * standby's feed, up to a minute on a replica's leader). A lobby keeps
 * them side by side in its owner's poll loop: each until its own
 * deadline, its line at most line_max bytes, at most max of them (the
 * oldest makes room); the first to say its line is the first out. */
#ifndef RESIHP_CONTROL_LOBBY_H
#define RESIHP_CONTROL_LOBBY_H

#include "wire.h"

#include <poll.h>

typedef struct resihp__lobby resihp__lobby_t;

/* 0 or RESIHP_EINVAL / RESIHP_ENOMEM. */
int resihp__lobby_create(int max, int wait_ms, size_t line_max,
                         resihp__lobby_t **out);
void resihp__lobby_destroy(resihp__lobby_t *l); /* closes what waits */
/* w (authenticated) is moved in; its deadline is wait_ms from now. */
void resihp__lobby_add(resihp__lobby_t *l, resihp__wire_t *w);
int resihp__lobby_count(const resihp__lobby_t *l);
/* The descriptors to poll for POLLIN, into p (room for max entries): how
 * many. */
int resihp__lobby_fds(const resihp__lobby_t *l, struct pollfd *p);
/* Milliseconds to the nearest deadline (0 if one passed), or max_ms if
 * none is nearer. */
int resihp__lobby_wait_ms(const resihp__lobby_t *l, int max_ms);
/* Read what came, without blocking; drop the late, the gone and the
 * overlong. 1 when a connection's first line is complete: the connection
 * is moved into *out and its line into line (cap bytes; a longer one is
 * refused); else 0. */
int resihp__lobby_next(resihp__lobby_t *l, resihp__wire_t *out, char *line,
                       size_t cap);

#endif
