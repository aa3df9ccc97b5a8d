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
 * 2. When the coordinator shrinks (resihp__coord_shrink) [todo]: the
 *    replica's program can move layers and holds its state by layer;
 *    at least one rank survives; L >= K' (every rank keeps a layer); and
 *    every dead rank's layers are held by a healthy member (a member
 *    whose partition covers them: always, since every member holds every
 *    layer). Otherwise it fails the replica as today. One shrink per
 *    boundary, as repartition (quiet(): no replica joining or catching
 *    up). All-or-nothing: a second failure of a survivor before the
 *    shrunk replica's first committed step fails the replica as today
 *    (the launcher has no spare: it is dropped), never a half-regrouped
 *    model.
 * 3. The new partition (resihp__shrink_plan, below) [done]: the planner
 *    (planner/partition.c, through the repartition's model) partitions
 *    the L layers over the K' survivors at their measured speeds
 *    (detector factors; 1 when unknown), one stage per rank, equal layer
 *    cost, as a repartition does; K' = 1 holds all L layers.
 *    The survivors are renumbered densely in their old order
 *    (resihp__shrink_rank): rank k becomes k minus the dead ranks below
 *    it, which is also the order in which resihp_comm_shrink renumbers
 *    the replica communicator, so both agree without talking.
 * 4. Per-replica K in the coordinator [todo]: rep_t gets k (0: the job's
 *    K). A replica's K is its committed partition's (cut points + 1), so
 *    the snapshot needs no new field: "y r lay=L:cuts" of a shrunk
 *    replica has K' - 1 cuts and a standby restores k from it;
 *    lay_parse's p.k == K becomes p.k == the replica's k (a BEGIN of K
 *    ranks from a replica the coordinator shrank is refused, a K'-rank
 *    one from a replica it did not, too). The arrays indexed by
 *    replica * K + rank (rank_slow, start_src) keep K slots per replica,
 *    a shrunk one using the first K'. home= becomes the shrunk partition
 *    (the declared K-rank one can never come back: a repartition moves
 *    within K' ranks); moved = 0.
 * 5. How the survivors learn it: the epoch is renewed with the same
 *    members (a shrunk replica is a member again from the next boundary,
 *    catching up) and its GO says shrunk=R.k[:R.k...] (replica R lost
 *    its rank k, old numbering; several items for several ranks, several
 *    replicas; resihp__shrunk_get in recovery/layer_groups.c, bounded:
 *    ids < 2^24, ranks < RESIHP__COORD_MAX_SHARDS; fuzz_shrunk) and lists
 *    the new partition in lparts= [parser done; writer todo]. lparts
 *    entries of different k: resihp__lparts_parse checks each partition
 *    against its own number of cut points, at most K ranks [todo]; the
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
 *    layers_shrunk = the new K'.
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
 *    (resihp__shrink_slowdown, below) [done], so the assignment gives it
 *    fewer microbatches by its new speed, as for a slow replica; the
 *    detector's samples of a shrunk replica are scaled as a moved one's
 *    (its rank's share of the layers now over the K-rank home share).
 * 9. What is said [todo]: resihp-run "replica R lost rank k (node N): no
 *    healthy spare left: it goes on with K' ranks (layers a,b)", an
 *    event "shrink" (step, replica, epoch, reason from=3,3 to=6
 *    predicted-step=x...), the summary's count of shrunk replicas and
 *    each one's K', and the failure record of the rank (kind rank-lost),
 *    whose replacement is the shrink's first committed step.
 * 10. Growing back when a spare appears later: not in this item's first
 *    cut; the replica stays K' ranks (a later swap relaunches it as K
 *    ranks through today's swap path, catch-up by layer giving them their
 *    declared partition). */
#include "config.h"

#include "coord_internal.h"

#include <resihp/error.h>

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
