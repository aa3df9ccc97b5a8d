/* SPDX-License-Identifier: BSD-3-Clause */
/* Regroup a pipeline replica that lost a rank when no spare is left
 * (issue 32, item 3): its K' surviving ranks take the dead ranks' layers
 * and go on as a K'-rank replica. A replica with one rank left is still a
 * replica. This file holds the decision's pure parts (the new partition,
 * the replica's multiplier); the design of the whole follows, each part
 * marked [done] where it is built, [todo] where it is not yet.
 *
 * Today. When any rank of a K-rank replica dies, the replica fails: the
 * leader (rank 0, the only rank that talks to the coordinator) sees its
 * star link close or the replica communicator fail
 * (resihp__job_replica_sum -> resihp__job_replica_lost) and leaves; the
 * coordinator fails the replica (coord_members.c leave -> on_failed);
 * resihp-run cancels its step and relaunches it on K spare nodes
 * (tools/run/events.c replace, launch.c launch), or, when pick_nodes finds
 * none, says "no healthy spare left for replica R: the job goes on with
 * the other replicas" and marks it failed for good
 * (resihp__coord_mark_failed "no spare"): its K - 1 healthy ranks are
 * dropped with it. The replica's steps already run with
 * --kill-on-bad-exit=0, so Slurm leaves the other tasks of a step alive
 * when one is killed.
 *
 * 1. Who decides: the coordinator, asked by the launcher, which alone
 *    knows whether a spare is left. [todo]
 *    - A rank that is not the leader dies: the leader learns it (its star
 *      link to that rank closes, or the replica communicator reports a
 *      dead peer within a step) and, when its program can move layers
 *      (BEGIN lmove=1) and declared its state by layer (lst=1), does not
 *      leave: it says "LOST k=<ranks> step=S" to the coordinator (a new
 *      line, one field: the dead ranks as a ':'-list, each < lsize) and
 *      its replica sits the step out as a replica that failed in it: the
 *      step's microbatches it held are reassigned in the step
 *      (RECOVER/REASSIGN, as today), the ledger counts them once.
 *    - The coordinator opens the failure record (kind rank-lost, the
 *      replica, the dead ranks) and calls the launcher's new
 *      on_rank_lost(r, ranks, node). resihp-run looks for K healthy
 *      spare nodes first (a replica is one srun step of K tasks; a spare
 *      for the lost rank alone would need a heterogeneous step): with
 *      them, today's path (fail the replica, cancel, relaunch); without
 *      (the place where "no healthy spare left ... the job goes on" is
 *      said today), it calls resihp__coord_shrink(c, r, dead), which
 *      shrinks the replica when it can (below), or fails it as today.
 *    - The leader itself dies: the coordinator sees the replica's link
 *      close and cannot tell a dead leader from a dead replica. First
 *      cut: the replica fails as today. Later: the lowest surviving rank
 *      (which knows the coordinator's addresses, job_coords.c) dials it
 *      and says HELLO for the same replica id with takeover=1 and the
 *      step's identity; the coordinator accepts it only while the
 *      replica's failure record is open and no relaunch started.
 * 2. When the coordinator shrinks (resihp__coord_shrink) [done]: the
 *    replica's program can move layers and holds its state by layer;
 *    at least one rank survives; L >= K' (every rank keeps a layer); and
 *    every dead rank's layers are held by a healthy member (a member
 *    whose partition covers them: always, since every member holds every
 *    layer). Otherwise it fails the replica as today. One shrink per
 *    boundary, as repartition (quiet(): no replica joining or catching
 *    up). All-or-nothing: a second failure of a survivor before the
 *    shrunk replica's first committed step fails the replica as today
 *    (the launcher has no spare: it is dropped), never a half-regrouped
 *    model. A shrink asked for is checked at once and waits for the
 *    next boundary (shrink_next; a free run is held for one): the
 *    replica's BEGINs until its GO say its partition before, which the
 *    coordinator takes. There, once every BEGIN is in, it is applied
 *    (checked again: a replica that failed meanwhile is left alone, one
 *    that cannot shrink any more fails) and is that epoch's GO's
 *    (shrunk_r, said again
 *    by a set-up's retry, gone at the next boundary); a repartition waits
 *    a boundary more. The snapshot keeps the shrink (the replica's "y"
 *    line: shrunk=AT:LOST:SLOW, and shrink=next:DEAD or shrink=now:DEAD
 *    while it waits for its GO or is the epoch's), so that a standby's
 *    GO says the same shrunk= and its summary and multiplier are the
 *    primary's. [done]
 * 3. The new partition (resihp__shrink_plan, below) [done]: the planner
 *    (planner/partition.c, through the repartition's model) partitions
 *    the L layers over the K' survivors at their measured speeds
 *    (detector factors; 1 when unknown), one stage per rank, equal layer
 *    cost, as a repartition does; K' = 1 holds all L layers.
 *    The survivors are renumbered densely in their old order
 *    (resihp__shrink_rank): rank k becomes k minus the dead ranks below
 *    it, which is also the order in which resihp_comm_shrink renumbers
 *    the replica communicator, so both agree without talking.
 * 4. Per-replica K in the coordinator [done]: rep_t gets k (0: the job's
 *    K). A replica's K is its committed partition's (cut points + 1), so
 *    the snapshot needs no new field: "y r lay=L:cuts" of a shrunk
 *    replica has K' - 1 cuts and a standby restores k from it;
 *    lay_parse's p.k == K becomes p.k == the replica's k (a BEGIN of K
 *    ranks from a replica the coordinator shrank is refused, a K'-rank
 *    one from a replica it did not, too). The arrays indexed by
 *    replica * K + rank (rank_slow, start_src) keep K slots per replica,
 *    a shrunk one using the first K'. home= becomes the shrunk partition
 *    (the declared K-rank one can never come back: a repartition moves
 *    within K' ranks); moved = 0. The replica's address lists keep K
 *    items, the survivors' first in their new order, then the dead
 *    ranks' (never dialled), so that every check of a K-item list holds
 *    and item k is new rank k's. A HELLO again=1 of a shrunk replica
 *    (after a failover) says lsize=K' and its survivors' K' addresses;
 *    the coordinator appends the dead ranks' it kept and compares as for
 *    any replica (resihp__coord_shrunk_hello) [done]; so does a new
 *    process of K' ranks of a shrunk replica (relaunch in place, 11)
 *    [done], which stays shrunk; a new process of K ranks (a later
 *    relaunch) resets k (resihp__coord_repart_reset; not tested end to
 *    end: its BEGIN of K ranks must then be taken as a new partition).
 *    A catch-up gives a joiner as many sources as it has ranks now
 *    (resihp__coord_serve_sources: the replica's K, not the job's) [done].
 * 5. How the survivors learn it: the epoch is renewed with the same
 *    members (a shrunk replica is a member again from the next boundary,
 *    catching up) and its GO says shrunk=R:k[,R:k...] (replica R lost
 *    its rank k, old numbering; several items for several ranks, several
 *    replicas; resihp__shrunk_get in recovery/layer_groups.c, bounded:
 *    ids < 2^24, ranks < RESIHP__SHRUNK_RANKS, items at most
 *    RESIHP__SHRUNK_ITEMS, none twice; fuzz_shrunk) and lists
 *    the new partition in lparts= [parser and writer done]. lparts
 *    entries of different k: resihp__lparts_parse checks each partition
 *    against its own number of cut points, at most K ranks [done]; the
 *    layer-run map (layer_groups.c) is built from the distinct
 *    partitions' cut points whatever their k, so a (3,3) replica and a
 *    (6) replica make runs 0-2 and 3-5, the shrunk replica's one rank in
 *    both groups: nothing changes there. The first epoch in which the
 *    partitions differ sends every member the whole list (as for a move).
 * 6. The survivors regroup (recovery/job_shrink.c) [todo]: on GO
 *    shrunk= naming their replica, every survivor calls
 *    resihp_comm_shrink on the replica communicator with the dead ranks
 *    as suspects (the replica communicator is a resihp_comm: its FT
 *    shrink agrees on the survivors); the agreed survivors must be the
 *    coordinator's, or the replica fails. lrank/lsize take the new
 *    numbering, part the new partition (no program-declared K any more:
 *    resihp_job_partition answers for K' ranks), the leader's down[]
 *    links of the dead ranks are closed and its results[] renumbered.
 *    The step's st gets layers_moved (as for a move: the program asks
 *    resihp_job_layers and resihp_job_partition again) and
 *    layers_shrunk = the new K'. Until then a replica whose GO gives it
 *    a partition it cannot take (shrunk, or moved without
 *    resihp_job_set_layers_movable) leaves at once (job_layers.c
 *    go_refused) [done]: before, it failed set-up after set-up, the
 *    others' set-ups with it, until the coordinator gave up on it, or on
 *    a healthy replica first (test_freerun
 *    layers_shrunk_replica_refuses: 2 of 6 runs, a 60 s stall).
 * 7. The state. The replica sat out the step in which its rank died, so
 *    every survivor's state is a step old: the survivors catch up every
 *    layer they now hold from the healthy members, by layer (the
 *    catch-up-by-layer machinery: START serve= Q.K:A-B@EP entries from
 *    resihp__coord_serve_sources, which already handles a catcher whose
 *    partition no member holds: with lst=1 each run of its layers comes
 *    from the member rank holding it). The dead rank's layers thus come
 *    from a healthy replica, and so do the survivors' own and moved ones:
 *    nothing moves over the replica communicator in this first cut.
 *    (Moving the survivors' layers over the replica communicator, the
 *    repartition machinery, pays only when the rank dies at a boundary,
 *    with the replica's state committed; then only the dead rank's
 *    layers come from outside.) Each rank's own state (":r", optimizer
 *    counters and the like) comes from the same-numbered rank of a
 *    healthy replica, as for a joiner.
 * 8. Its share of the microbatches: the replica's multiplier is the
 *    planner's predicted step of the K'-rank partition at the survivors'
 *    factors over that of the healthy K-rank replica at home
 *    (resihp__shrink_slowdown, below; rep_t.shrink_slow) [done], so the
 *    assignment gives it fewer microbatches by its new speed, as for a
 *    slow replica; the
 *    detector's samples of a shrunk replica are scaled as for an even
 *    K-rank share (L / K over its rank's layers now), its multiplier the
 *    detector's factor times shrink_slow (coord_repart.c) [done]; each
 *    of its ranks is a detector stage of its own (its rank k holds none
 *    of the layers the others' rank k holds: it is nobody's peer), judged
 *    against its own baseline (resihp__coord_perf_stages) [done].
 * 9. What is said [coordinator's done: the log line, the event, the
 *    summary; resihp-run's and the failure record todo]: resihp-run
 *    "replica R lost rank k (node N): no healthy spare left: it goes on
 *    with K' ranks (layers a,b)", an event "shrink" (step, replica, the
 *    epoch, kind no-spare, reason lost=k ranks=K' to=a,b
 *    predicted-step=x...), the summary's count of shrinks and each
 *    shrunk replica's line (K' of K since step S, its cut points, its
 *    predicted step), and the failure record of the rank (kind rank-lost),
 *    whose replacement is the shrink's first committed step.
 *    A replica that moved its layers (a repartition) can still shrink
 *    when its program commits the move by layer
 *    (resihp_job_commit_layer_state: its BEGINs still say lst=1;
 *    resihp_job_commit_layers makes its state opaque) [done]. A second
 *    failure during the regroup (a rank of the relaunch in place lost
 *    while it catches up) fails it at once on its leader's FAULT
 *    kind=lost, and resihp-run gives it up: it already shrank
 *    (test_freerun layers_shrunk_second_failure) [done]. Its process of
 *    K' ranks takes the coordinator's cost plan of K models
 *    (resihp__costplan_models) [done].
 * 10. Growing back when a spare appears later: not in this item's first
 *    cut; the replica stays K' ranks (a later swap relaunches it as K
 *    ranks through today's swap path, catch-up by layer giving them their
 *    declared partition).
 * 11. A simpler road for the library part, weighed for the next step:
 *    the shrink as a relaunch in place. The replica fails as today (its
 *    microbatches reassigned in the step, the ledger exact by the
 *    existing path); the launcher, finding no spare, does not cancel the
 *    step but allows a K'-rank process of the replica (the coordinator
 *    then accepts a HELLO of lsize=K' for it, sets k, and refuses any
 *    other: resihp__coord_shrink_in_place, the coordinator's part [done]:
 *    the failed replica gets the planner's partition over its survivors
 *    at once, its addresses survivors first, its multiplier, the event,
 *    the count; its next process of K' ranks catches up by layer;
 *    test_coord_failover test_layers_shrunk_in_place). The library takes
 *    a K'-rank process of a job of K (GO's partitions of up to the
 *    bound, not of its own lsize; the other ranks' columns of the
 *    members' lists up to the most ranks of any partition, job_step.c)
 *    [done]: a new process of K' ranks on the survivors' nodes catches
 *    everything up by layer and trains on (test_freerun
 *    layers_shrunk_in_place: 2 ranks to 1, SIGKILL from outside, the
 *    failure-free result, ledger exact). That first cut is a relaunch
 *    on the survivors' nodes, not in the survivors' processes: the
 *    replica fails and its step is cancelled as today, so nothing new
 *    is needed in the survivors (no LOST line, no renumbering, no
 *    re-join API), at the cost of a process start; every layer comes
 *    from the healthy replicas anyway (7); 2 ranks to 1 and 3 to 2 are
 *    tested. resihp-run's call [done]: where launch finds no spare
 *    (tools/run/launch.c shrink_in_place) it tells the dead nodes of the
 *    failed step from the survivors' (the node an injected kill-node ran
 *    its command for, or one scontrol says is DOWN), their ranks
 *    (shrink_pick.c: Slurm's block order), calls
 *    resihp__coord_shrink_in_place and starts a K'-task step on the
 *    survivors' nodes, whose nodes a failure had marked bad; with none
 *    of them known dead yet and the replica able to shrink
 *    (resihp__coord_shrink_able), it waits for Slurm's verdict up to
 *    twice SlurmdTimeout (a node killed from outside). A rank killed on
 *    a node that lives on [done]: its leader sees that rank's star link
 *    close without the BYE a rank leaving on its own says first
 *    (resihp_job_destroy) and says FAULT kind=lost rank=k at once
 *    (job_replica.c report_lost); the coordinator keeps it
 *    (rep_t.lost_now, resihp__coord_lost_ranks) and resihp-run takes
 *    that rank's node for dead at the failure, without a wait. (When a
 *    survivor's report fails the replica before that line is read, it
 *    is not known: the wait for Slurm's verdict, as for a node.)
 *    The relaunched process learns its partition (WELCOME lay= with
 *    shrunk=1, passed to every rank in the leader's RANKS line:
 *    resihp_job_shrunk_partition) [done], and
 *    contrib/pipeline-trainer --move-layers declares it and its state by
 *    unit (tests/integration/shrink.test). The
 *    in-process variant: the survivors' program, whose step failed,
 *    agrees on the
 *    survivors over the old replica communicator (resihp_comm_shrink:
 *    its new rank and K'), destroys its job and joins again as that
 *    K'-rank process (the other ranks find the new leader through the
 *    coordinator, SUBHELLO/LEP), declares its layers for K' ranks and its
 *    state by layer, and catches everything up by layer as any
 *    replacement whose partition no member holds (what 7 does anyway,
 *    the survivors' state being a step old). No GO shrunk=, no
 *    renumbering inside a live job; the cost is a re-join (a second or
 *    so) and an API to join with a given rank and size. The parts above
 *    marked done (partition, multiplier, per-replica K, lparts of fewer
 *    ranks, the summary and event) serve both roads. */
#include "config.h"

#include "../recovery/layer_groups.h"
#include "coord_internal.h"

#include <resihp/error.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int resihp__shrink_plan(int L, int K, uint64_t dead, const double *factor,
                        int mbs, int *out) {
  if (K < 1 || K > RESIHP__COORD_MAX_SHARDS || L < 1)
    return RESIHP_EINVAL;
  double f[RESIHP__COORD_MAX_SHARDS];
  int kn = 0;
  for (int k = 0; k < K; k++)
    if (!(dead >> k & 1))
      f[kn++] = factor ? factor[k] : 1;
  if (kn < 1 || kn == K || (K < 64 && dead >> K) || L < kn)
    return RESIHP_EINVAL;
  if (kn == 1) {
    out[0] = L;
    return 1;
  }
  int rc = resihp__repart_plan(L, kn, f, mbs, out);
  return rc ? rc : kn;
}

double resihp__shrink_slowdown(int L, int K, const int *home, int kn,
                               const double *factor, const int *counts,
                               int mbs) {
  return resihp__repart_ratio(L, kn, factor, counts, K, home, mbs);
}

/* The items of a '/'-list (a replica's addresses) reordered: the
 * survivors' first, in their order, then the dead ranks' (never dialled:
 * no partition gives them a layer), so that item k is new rank k's and
 * the list keeps K items wherever a K-rank list is checked. */
static int reorder(const char *list, int K, unsigned long long dead,
                   char **out) {
  size_t n = strlen(list);
  char *o = malloc(n + 1), item[RESIHP__COORD_EP_MAX];
  if (!o)
    return RESIHP_ENOMEM;
  size_t at = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < K; k++) {
      if (((dead >> k) & 1) != (unsigned long long)pass)
        continue;
      if (resihp__wire_list_item(list, k, item, sizeof(item))) {
        free(o);
        return RESIHP_EPROTO;
      }
      at += (size_t)snprintf(o + at, n + 1 - at, "%s%s", at ? "/" : "", item);
    }
  *out = o;
  return 0;
}

/* The items n.. of the kept list `kept` after `list` (n items, cap
 * bytes): 0, or RESIHP_EINVAL (a kept list of fewer, or too long). */
static int pad(char *list, const char *kept, int n, int K, size_t cap) {
  size_t at = strlen(list);
  char item[RESIHP__COORD_EP_MAX];
  for (int k = n; k < K; k++) {
    if (!kept || resihp__wire_list_item(kept, k, item, sizeof(item)) ||
        at + 1 + strlen(item) >= cap)
      return RESIHP_EINVAL;
    at += (size_t)snprintf(list + at, cap - at, "/%s", item);
  }
  return 0;
}

int resihp__coord_shrunk_hello(const resihp__coord_t *c, int r, int n,
                               char *ep, char *sep, size_t cap) {
  const rep_t *p = &c->reps[r];
  if (!p->k || n != p->k || n >= c->K)
    return RESIHP_EINVAL;
  char e[RESIHP__COORD_EPS_MAX], s[RESIHP__COORD_EPS_MAX];
  if (cap > sizeof(e))
    cap = sizeof(e);
  snprintf(e, sizeof(e), "%s", ep);
  snprintf(s, sizeof(s), "%s", sep);
  if (pad(e, p->ep, n, c->K, cap) || pad(s, p->sep, n, c->K, cap))
    return RESIHP_EINVAL;
  memcpy(ep, e, strlen(e) + 1);
  memcpy(sep, s, strlen(s) + 1);
  return 0;
}

/* Whether replica r can shrink by dead now (a member, or with gone one
 * that failed, for a relaunch in place): 0, or why not (with nothing
 * changed). */
static int can_shrink(const resihp__coord_t *c, int r, unsigned long long dead,
                      int gone) {
  const rep_t *p = &c->reps[r];
  if (p->state != (gone ? R_GONE : R_MEMBER) || !p->lpart || !c->nlayers ||
      !p->ep || !p->sep)
    return RESIHP_ESTATE;
  /* its program must be able to take other layers and catch them up by
   * layer from the healthy replicas */
  if (!p->lmove || !p->lstate)
    return RESIHP_ESTATE;
  int counts[RESIHP__COORD_MAX_SHARDS];
  int kn = resihp__shrink_plan(c->nlayers, resihp__coord_rep_k(c, r), dead,
                               NULL, 1, counts);
  return kn < 1 ? kn : 0;
}

int resihp__coord_shrink(resihp__coord_t *c, int r, unsigned long long dead) {
  if (r < 0 || r >= c->R)
    return RESIHP_EINVAL;
  if (c->shrink_next || c->stop)
    return RESIHP_EBUSY; /* one at a time, at a boundary */
  int rc = can_shrink(c, r, dead, 0);
  if (rc)
    return rc;
  /* taken at the next boundary, once the members' BEGINs are in: its
   * ranks say their partition before until its GO tells them */
  c->shrink_next = r + 1;
  c->shrink_next_dead = dead;
  logc(RESIHP_LOG_WARN,
       "replica %d lost ranks (bits %#llx) at step %ld and no spare is left: "
       "it goes on with the others from the next step boundary",
       r, dead, c->step);
  resihp__coord_dirty(c);
  resihp__coord_hold(c, "a replica shrinks"); /* free run: a boundary */
  return 0;
}

/* Give member r (or with gone, replica r that failed) the partition of
 * the planner over its survivors (dead: the ranks it lost): 0, or an
 * error with nothing changed. */
static int apply(resihp__coord_t *c, int r, unsigned long long dead,
                 int gone) {
  rep_t *p = &c->reps[r];
  int K = resihp__coord_rep_k(c, r);
  int rc = can_shrink(c, r, dead, gone);
  if (rc)
    return rc;
  int counts[RESIHP__COORD_MAX_SHARDS];
  double f[RESIHP__COORD_MAX_SHARDS];
  for (int k = 0; k < K; k++)
    f[k] = c->rank_slow ? c->rank_slow[r * c->K + k] : 1;
  int mbs = p->quota > 0 ? p->quota : 1;
  int kn = resihp__shrink_plan(c->nlayers, K, dead, f, mbs, counts);
  if (kn < 1)
    return kn;
  /* its multiplier: the new partition's step at the survivors' factors
   * over a healthy K-rank replica's at its declared (or present) home */
  int home[RESIHP__COORD_MAX_SHARDS];
  resihp__partition_t hp;
  if (resihp__partition_parse(p->home[0] ? p->home
                                          : c->lparts[p->lpart - 1].text,
                              c->nlayers, &hp))
    return RESIHP_EPROTO;
  for (int k = 0; k < hp.k; k++)
    home[k] = hp.bounds[k + 1] - hp.bounds[k];
  int hk = hp.k;
  resihp__partition_free(&hp);
  double fn[RESIHP__COORD_MAX_SHARDS];
  for (int k = 0, i = 0; k < K; k++)
    if (!(dead >> k & 1))
      fn[i++] = f[k];
  double slow =
      resihp__shrink_slowdown(c->nlayers, hk, home, kn, fn, counts, mbs);
  /* the partition's text, then everything or nothing */
  resihp__partition_t np;
  char cuts[RESIHP__COORD_LAY_MAX], lay[RESIHP__COORD_LAY_MAX + 16];
  if (resihp__partition_from_counts(counts, kn, c->nlayers, &np))
    return RESIHP_EINVAL;
  rc = resihp__partition_format(&np, cuts, sizeof(cuts));
  resihp__partition_free(&np);
  if (rc)
    return rc;
  snprintf(lay, sizeof(lay), "%d%s%s", c->nlayers, cuts[0] ? ":" : "", cuts);
  char *ep = NULL, *sep = NULL;
  if ((rc = reorder(p->ep, c->K, dead, &ep)) ||
      (rc = reorder(p->sep, c->K, dead, &sep))) {
    free(ep);
    return rc;
  }
  char from[RESIHP__COORD_LAY_MAX];
  snprintf(from, sizeof(from), "%s", c->lparts[p->lpart - 1].text);
  int was_k = p->k;
  p->k = kn;
  int same = 1; /* every member held one partition so far */
  for (int i = 0; i < c->nmembers && same; i++)
    same = c->reps[c->members[i]].lpart == p->lpart;
  if ((rc = resihp__coord_set_layers(c, r, lay))) {
    p->k = was_k;
    free(ep);
    free(sep);
    return rc;
  }
  free(p->ep);
  free(p->sep);
  p->ep = ep;
  p->sep = sep;
  /* as for a move: the first epoch in which the partitions differ sends
   * every member the whole list (coord_repart.c) */
  for (int i = 0; i < c->nmembers && same; i++)
    c->reps[c->members[i]].list_epoch = 0;
  p->list_epoch = 0; /* its addresses changed */
  snprintf(p->home, sizeof(p->home), "%s", cuts);
  p->moved = 0;
  p->moved_at = c->step; /* (no repartition within REPART_SPACING) */
  p->lost |= dead;
  p->shrunk_at = c->step + 1;
  p->shrink_slow = slow;
  p->slow = slow;
  resihp__coord_perf_stages(c, r); /* its ranks: peers of nobody now */
  c->shrinks++;
  char lost[3 * RESIHP__COORD_MAX_SHARDS] = "", to[RESIHP__COORD_LAY_MAX] = "";
  size_t a = 0, b = 0;
  for (int k = 0; k < K && a < sizeof(lost); k++)
    if (dead >> k & 1)
      a += (size_t)snprintf(lost + a, sizeof(lost) - a, "%s%d", a ? "," : "",
                            k);
  for (int k = 0; k < kn && b < sizeof(to); k++)
    b += (size_t)snprintf(to + b, sizeof(to) - b, "%s%d", k ? "," : "",
                          counts[k]);
  logc(RESIHP_LOG_WARN,
       "replica %d lost rank(s) %s and no spare is left: from step %ld it "
       "goes on with %d rank(s) holding %s layers (cut at %s before), "
       "predicted step x%.2f",
       r, lost, c->step, kn, to, from[0] ? from : "-", slow);
  char why[2 * RESIHP__COORD_LAY_MAX + 64];
  snprintf(why, sizeof(why), "lost=%s ranks=%d to=%s predicted-step=x%.2f",
           lost, kn, to, slow);
  resihp__record_event(c->o.record, "shrink", c->step, r, c->epoch + 1,
                       "no-spare", why, slow);
  return 0;
}

int resihp__coord_shrink_able(const resihp__coord_t *c, int r) {
  if (r < 0 || r >= c->R)
    return RESIHP_EINVAL;
  if (c->stop || c->state != RESIHP__COORD_RUNNING)
    return RESIHP_ESTATE;
  int K = resihp__coord_rep_k(c, r);
  return K < 2 ? RESIHP_EINVAL : can_shrink(c, r, 1ULL << (K - 1), 1);
}

unsigned long long resihp__coord_lost_ranks(const resihp__coord_t *c, int r) {
  return r >= 0 && r < c->R ? c->reps[r].lost_now : 0;
}

int resihp__coord_shrink_in_place(resihp__coord_t *c, int r,
                                  unsigned long long dead) {
  if (r < 0 || r >= c->R)
    return RESIHP_EINVAL;
  if (c->stop || c->state != RESIHP__COORD_RUNNING)
    return RESIHP_ESTATE;
  /* (no boundary to wait for: it is no member; its new process catches
   * up its new partition by layer as any replacement) */
  return apply(c, r, dead, 1);
}

void resihp__coord_shrink_boundary(resihp__coord_t *c) {
  c->shrunk_r = -1;
  c->shrunk_dead = 0;
  if (!c->shrink_next)
    return;
  int r = c->shrink_next - 1;
  unsigned long long dead = c->shrink_next_dead;
  c->shrink_next = 0;
  c->shrink_next_dead = 0;
  resihp__coord_dirty(c);
  if (!resihp__coord_is_member(c, r))
    return; /* it failed meanwhile: nothing to shrink */
  int rc = apply(c, r, dead, 0);
  if (rc) { /* (its program changed its mind: a BEGIN without lmove=) */
    logc(RESIHP_LOG_ERROR, "replica %d cannot shrink now (%s): it fails", r,
         resihp_strerror(rc));
    resihp__coord_fail_replica(c, r, "could not shrink");
    return;
  }
  c->shrunk_r = r;
  c->shrunk_dead = dead;
  c->changed = 1; /* a new epoch, the same members */
}

void resihp__coord_put_shrunk(const resihp__coord_t *c, resihp__wire_buf_t *b) {
  if (c->shrunk_r < 0)
    return;
  int first = 1;
  for (int k = 0; k < RESIHP__SHRUNK_RANKS; k++)
    if (c->shrunk_dead >> k & 1) {
      resihp__wire_buf_printf(b, "%s%d:%d", first ? " shrunk=" : ",",
                              c->shrunk_r, k);
      first = 0;
    }
}

void resihp__coord_put_shrink_state(const resihp__coord_t *c, int r,
                                    resihp__wire_buf_t *b) {
  const rep_t *p = &c->reps[r];
  if (p->shrunk_at)
    resihp__wire_buf_printf(b, " shrunk=%ld:%llu:%.17g", p->shrunk_at,
                            p->lost, p->shrink_slow);
  if (c->shrink_next == r + 1)
    resihp__wire_buf_printf(b, " shrink=next:%llu", c->shrink_next_dead);
  else if (c->shrunk_r == r)
    resihp__wire_buf_printf(b, " shrink=now:%llu", c->shrunk_dead);
  /* the ranks its leader said it lost, for the launcher's shrink: a
   * standby that takes over before the replica's failure is seen keeps
   * them, or it would wait for Slurm's verdict on a node that lives */
  if (p->lost_now)
    resihp__wire_buf_printf(b, " lostnow=%llu", p->lost_now);
}

/* A decimal unsigned 64-bit number at *s, up to `end` (one of its bytes,
 * or ' ' and '\0' both when end is ' '): 0 and *s past it, or -1. */
static int u64_at(const char **s, char end, unsigned long long *v) {
  const char *q = *s;
  if (*q < '0' || *q > '9')
    return -1;
  errno = 0;
  char *e;
  *v = strtoull(q, &e, 10);
  if (errno || (*e != end && !(end == ' ' && !*e)))
    return -1;
  *s = e;
  return 0;
}

/* Bits of ranks a replica of the job's K may have had. */
static int ranks_ok(const resihp__coord_t *c, unsigned long long bits) {
  return bits && (c->K >= 64 || bits >> c->K == 0);
}

int resihp__coord_shrink_restore(resihp__coord_t *c, int r, const char *s) {
  rep_t *p = &c->reps[r];
  unsigned long long at, lost, dead;
  if (!strncmp(s, " shrunk=", 8)) {
    s += 8;
    if (u64_at(&s, ':', &at) || at < 1 || at > (unsigned long long)MAX_STEPS + 1)
      return RESIHP_EPROTO;
    s++;
    if (u64_at(&s, ':', &lost) || !ranks_ok(c, lost))
      return RESIHP_EPROTO;
    s++;
    size_t n = strcspn(s, " ");
    char num[32], *e;
    if (n == 0 || n >= sizeof(num))
      return RESIHP_EPROTO;
    memcpy(num, s, n);
    num[n] = '\0';
    errno = 0;
    double slow = strtod(num, &e);
    if (errno || *e || !isfinite(slow) || slow < 1 || slow > 1e6)
      return RESIHP_EPROTO;
    s += n;
    p->shrunk_at = (long)at;
    p->lost = lost;
    p->shrink_slow = slow;
  }
  if (!strncmp(s, " shrink=", 8)) {
    s += 8;
    int next = !strncmp(s, "next:", 5);
    if (!next && strncmp(s, "now:", 4))
      return RESIHP_EPROTO;
    s += next ? 5 : 4;
    /* (one shrink at a time, of a member: the snapshot lists the
     * members before the partitions) */
    if (u64_at(&s, ' ', &dead) || !ranks_ok(c, dead) ||
        (!next && !p->shrunk_at) || c->shrink_next || c->shrunk_r >= 0 ||
        !resihp__coord_is_member(c, r))
      return RESIHP_EPROTO;
    if (next) {
      c->shrink_next = r + 1;
      c->shrink_next_dead = dead;
    } else {
      c->shrunk_r = r;
      c->shrunk_dead = dead;
    }
  }
  if (!strncmp(s, " lostnow=", 9)) {
    s += 9;
    unsigned long long bits;
    if (u64_at(&s, ' ', &bits) || !ranks_ok(c, bits) || (bits & 1))
      return RESIHP_EPROTO; /* (ranks 1..k-1: a leader cannot lose itself) */
    p->lost_now = bits;
  }
  return *s ? RESIHP_EPROTO : 0;
}
