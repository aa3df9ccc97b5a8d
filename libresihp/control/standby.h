/* SPDX-License-Identifier: BSD-3-Clause */
/* The standby's feed: the primary's state records, streamed to a standby
 * resihp-run on another node of the allocation.
 *
 * The keeper (keeper.h) outlives a coordinator that dies or hangs, but not
 * the loss of its own node. So the primary also sends every state record
 * (the launcher's and the coordinator's, what the keeper holds) to a
 * standby process that it starts on another node: the standby keeps the
 * newest one and, when the primary's node is lost, becomes the keeper of
 * a new primary restored from it (tools/run/record.c), on its own address,
 * which the replicas know (COORDS, recovery/job_coords.c).
 *
 * The link. The standby dials the primary's feed socket (one the keeper
 * holds, so that it survives the keeper's own failovers), authenticates
 * with the job's secret (label "standby") and says
 * "STANDBY ep=HOST:PORT node=NAME step=JOB.STEP token=T" (its Slurm
 * step, for the primary to cancel it if it replaces it; T, the credential
 * the primary handed it at launch). The primary takes only the standby it
 * expects (the node it started one on, and its token): an old standby
 * that comes back never pushes its successor out, and another member of
 * the job never takes its place. The primary then sends the newest
 * record whenever it changes ("REC n=BYTES" and the bytes, sealed: a MAC
 * over them) and "HB" every beat otherwise; "BYE" when the job is over.
 * Only the newest record matters, so a slow standby is sent the newest one
 * when it is ready, never a queue. One standby at a time: a new one
 * replaces the old. The standby says "HB" every beat while it follows:
 * the primary's lease (vouch.h) holds while it hears them. */
#ifndef RESIHP_CONTROL_STANDBY_H
#define RESIHP_CONTROL_STANDBY_H

#include <stddef.h>
#include <stdint.h>

/* Largest record taken (bytes): far beyond the state of 100K replicas. */
#define RESIHP__FEED_REC_MAX (1u << 30)
/* The feed's heartbeat period (ms). */
#define RESIHP__FEED_BEAT_MS 200

/* ---- the primary's side ---- */

typedef struct resihp__feed resihp__feed_t;

/* Serve standbys on listening socket lfd (not taken over), authenticated
 * with secret (copied). A thread does the work. 0 or a negative code. */
int resihp__feed_start(int lfd, const uint8_t *secret, size_t secret_len,
                       resihp__feed_t **out);
/* Take only a standby on node (NULL or "": any) that says token (the
 * credential the primary handed the standby it launched, through its
 * step's environment; NULL or "": none asked). Anyone else with the job's
 * secret who names the node is refused: it would get every state record
 * and become the replicas' failover address. */
void resihp__feed_expect(resihp__feed_t *f, const char *node,
                         const char *token);
/* The newest record (copied; replaces any not sent yet); its number. */
unsigned long resihp__feed_put(resihp__feed_t *f, const void *rec,
                               size_t len);
/* Whether record seq (or a newer one) has gone out to the standby
 * connected now: it then holds it unless it dies. */
int resihp__feed_sent(resihp__feed_t *f, unsigned long seq);
/* The standby connected now: 1 with its coordinator address, node and
 * Slurm step, 0 when none is. *gen (may be NULL) changes whenever that
 * does. ep, node, step may be NULL. */
int resihp__feed_standby(resihp__feed_t *f, char *ep, size_t epcap, char *node,
                         size_t nodecap, char *step, size_t stepcap,
                         unsigned *gen);
/* When the standby connected now last said anything (it says HB every
 * beat while it follows: then it does not take over, vouch.h); 0 when
 * none is connected. resihp__now_ms clock. */
int64_t resihp__feed_heard_ms(resihp__feed_t *f);
/* The job is over: tell the standby (BYE), which then leaves; waits up to
 * wait_ms for the word to go out. */
void resihp__feed_bye(resihp__feed_t *f, int wait_ms);
/* Stop the thread and free everything (NULL: nothing). */
void resihp__feed_stop(resihp__feed_t *f);

/* ---- the standby's side ---- */

/* Follow the feed at ep: authenticate, say hello (the STANDBY line), and
 * keep the newest record in *rec (malloc'd; the one before is freed) and
 * *len, saying HB every beat. Returns 1 when the primary said BYE, or a
 * negative code when the link failed or said nothing for silence_ms: then
 * *rec is the last complete record, if any. tick(ud, heard) (may be
 * NULL): called at least every beat while it follows, heard 1 when the
 * primary said something since the last call (it is there). */
int resihp__feed_follow(const char *ep, const uint8_t *secret,
                        size_t secret_len, const char *hello, int silence_ms,
                        char **rec, size_t *len,
                        void (*tick)(void *ud, int heard), void *ud);
/* Its pieces, for tests and the fuzz target: a REC line's byte count
 * (0, or RESIHP_EPROTO for a line that is not one or a count beyond
 * RESIHP__FEED_REC_MAX), and a STANDBY line's address, node and step
 * (plain tokens that fit; the step "-" when it has none). */
int resihp__feed_parse_rec(const char *line, size_t *n);
/* 1 when a STANDBY line says token=want (compared in constant time);
 * always 1 when want is NULL or "" (no token asked), else 0. */
int resihp__feed_token_ok(const char *line, const char *want);
int resihp__feed_parse_hello(const char *line, char *ep, size_t epcap,
                             char *node, size_t nodecap, char *step,
                             size_t stepcap);

#endif
