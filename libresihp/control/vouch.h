/* SPDX-License-Identifier: BSD-3-Clause */
/* The standby's early takeover: the replicas' word that they lost the
 * primary, and the coordinator's term that fences the old one.
 *
 * Slurm declares a lost node DOWN only after SlurmdTimeout (tens of
 * seconds). The replicas notice the loss of their coordinator within the
 * silence bound (or at once when its link closes), so a standby that takes
 * over on their word saves the difference. Its danger is split brain: a
 * primary that is alive but silent (stopped, cut off) and a standby that
 * both decide. The rules (resihp-run(1), FAILOVER):
 *
 * Vouching. A leader that lost its link to the coordinator tries the next
 * address (recovery/job_link.c); at a standby that still follows nobody,
 * its HELLO again=1 (replica=R cred=C term=T) is a vouch: the standby
 * checks R and C against the last record it holds (R a member of the
 * last membership, C the credential the primary's WELCOME gave it) and
 * answers VOUCHED term=T+1. From then on the replica obeys no coordinator
 * of a term below T+1 (a WELCOME of a smaller term is refused), until the
 * standby lets it go (RELEASED: it follows the primary again) or takes
 * over (its coordinator says WELCOME term=T+1).
 *
 * Takeover. The standby takes over when it has lost the primary's feed,
 * at least resihp__vouch_need(M) of the M members vouched, and the
 * primary's lease (below) has run out since the later of the two:
 * silence bound plus a margin (resihp__vouch_wait_ms). Its coordinator is
 * of term T+1 (the record's term plus one).
 *
 * The primary's lease. The primary decides (fails a member, sets up an
 * epoch, launches, cancels) only while it heard, within the silence
 * bound, from its standby following it, or from enough members that no
 * standby can have need(M) vouchers: resihp__vouch_lease. A primary that
 * lost its lease steps down for good (tools/run/primary.c). The two sets
 * of members cannot both hold: a voucher has left the primary before it
 * vouched, and the standby waits a full bound after the last vouch it
 * counts.
 *
 * need(M) is a strict majority of M, and never less than 2: a single
 * replica's word never moves the coordinator. With 2 replicas both must
 * vouch; when one of them died with the primary's node, no majority can
 * speak, and the standby waits for Slurm's verdict as before (the
 * primary's node DOWN), the path that needs nobody's word. */
#ifndef RESIHP_CONTROL_VOUCH_H
#define RESIHP_CONTROL_VOUCH_H

#include <stddef.h>
#include <stdint.h>

/* A credential: 16 random bytes as hex (RESIHP__COORD_CRED_HEX). */
#define RESIHP__VOUCH_CRED_HEX 32

/* Vouchers a standby needs out of `members`: a strict majority, at least
 * 2. */
int resihp__vouch_need(int members);
/* 1 when a primary that heard `heard` of its `members` within the bound
 * still holds its lease: so many that the rest cannot be need(members). */
int resihp__vouch_lease(int members, int heard);
/* How long the standby waits, after the later of the feed's loss and the
 * vouch that made the count, before it takes over: the primary's lease
 * (silence_ms) plus a margin for scheduling and clock rates. */
int resihp__vouch_wait_ms(int silence_ms);

/* A vouch: a HELLO again=1 line. replica=, cred= (hex of its length) and
 * term= (absent: 0) into *replica, cred, *term. 0, or RESIHP_EPROTO for
 * any other line. */
int resihp__vouch_parse(const char *line, int *replica,
                        char cred[RESIHP__VOUCH_CRED_HEX + 1], uint32_t *term);

typedef struct resihp__vouch resihp__vouch_t;

/* A count of vouchers against the membership of a coordinator's state
 * record (its coordinator part, resihp__coord_snapshot): members, their
 * credentials, its term. 0, RESIHP_ENOMEM, or RESIHP_EPROTO for a text
 * that is not one. replicas: the job's R. */
int resihp__vouch_create(const char *snap, size_t len, int replicas,
                         resihp__vouch_t **out);
void resihp__vouch_destroy(resihp__vouch_t *v);
/* The record's term and membership size. */
uint32_t resihp__vouch_term(const resihp__vouch_t *v);
int resihp__vouch_members(const resihp__vouch_t *v);
/* Replica's vouch with credential cred, at now_ms: 1 counted, 0 counted
 * before, RESIHP_EAUTH when it is no member or the credential is not its
 * own. */
int resihp__vouch_add(resihp__vouch_t *v, int replica, const char *cred,
                      int64_t now_ms);
/* 1 when replica's vouch was counted. */
int resihp__vouch_has(const resihp__vouch_t *v, int replica);
/* Vouchers counted; when the count reached need (0: not yet). */
int resihp__vouch_count(const resihp__vouch_t *v);
int64_t resihp__vouch_reached(const resihp__vouch_t *v);
/* Whether to take over at now_ms: need reached, and wait_ms passed since
 * both that and lost_ms (the feed's loss; 0: not lost). */
int resihp__vouch_ready(const resihp__vouch_t *v, int64_t lost_ms,
                        int64_t now_ms, int wait_ms);
/* Forget every vouch (the standby follows the primary again). */
void resihp__vouch_clear(resihp__vouch_t *v);

#endif
