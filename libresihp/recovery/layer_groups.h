/* SPDX-License-Identifier: BSD-3-Clause */
/* Data-parallel groups keyed by layers (issue 32; see resihp/job.h).
 *
 * The model is L layers, 0..L-1, each with a number of gradient elements
 * that the program declares (resihp_job_set_layers). A replica of K ranks
 * holds them in a partition: K contiguous ranges, rank k holding
 * [bounds[k], bounds[k+1]) with 0 = bounds[0] < ... < bounds[K] = L,
 * written as its K-1 cut points "c1:c2:..." ("" when K = 1).
 *
 * Replicas may hold different partitions (a stage gave layers away, a
 * replica shrank to K-1 ranks). The union of the cut points of every
 * DISTINCT partition splits 0..L into runs; each run lies inside one range
 * of every partition, so each replica has exactly one rank that holds it:
 * the run's fault-tolerant group is those ranks, one per replica, and its
 * id is the run's first layer (every replica derives the same ids from the
 * same committed partitions without talking). A rank's layers are a whole
 * number of consecutive runs; it exchanges each run's slice of its
 * gradient in that run's group. With identical partitions the runs are
 * the K ranges and the groups today's K shard groups.
 *
 * The map is built from the distinct partitions only (a job of thousands
 * of replicas usually has 1 to 3): O(D K log(D K)) to build, O(log) per
 * look-up, nothing per replica. Pure functions of their input (the unit
 * test tests/unit/test_layer_groups.c and the fuzz target
 * tests/fuzz/fuzz_layer_groups.c drive them). */
#ifndef RESIHP_RECOVERY_LAYER_GROUPS_H
#define RESIHP_RECOVERY_LAYER_GROUPS_H

#include <stddef.h>

/* Most layers a model may declare: a partition's text must fit in a
 * control line with the rest of it. */
#define RESIHP__LAYERS_MAX 100000

/* A partition of nlayers layers over k ranks: bounds has k + 1 entries. */
typedef struct {
  int k;
  int *bounds;
} resihp__partition_t;

/* Parse cut points "c1:c2:..." (strictly increasing, each in 1..L-1; ""
 * is one rank holding everything) into *p (bounds malloc'ed; free with
 * resihp__partition_free). 0, RESIHP_EPROTO or RESIHP_ENOMEM. */
int resihp__partition_parse(const char *text, int nlayers,
                            resihp__partition_t *p);
/* The same from run lengths n[0..k) (each >= 1, summing to nlayers), as a
 * program or the planner states a partition. RESIHP_EINVAL otherwise. */
int resihp__partition_from_counts(const int *n, int k, int nlayers,
                                  resihp__partition_t *p);
/* The cut points as text into out (cap bytes): 0, or RESIHP_ERANGE. */
int resihp__partition_format(const resihp__partition_t *p, char *out,
                             size_t cap);
/* 1 when both are the same partition. */
int resihp__partition_equal(const resihp__partition_t *a,
                            const resihp__partition_t *b);
/* The rank of p that holds layer l (0 <= l < L). */
int resihp__partition_holder(const resihp__partition_t *p, int layer);
void resihp__partition_free(resihp__partition_t *p);

/* The runs of a set of distinct partitions: run r is layers
 * [first[r], first[r + 1]), first[nruns] = nlayers. */
typedef struct {
  int nlayers;
  int nruns;
  int *first;
} resihp__runmap_t;

/* The runs of parts[0..nparts) (each of nlayers layers; repeats are
 * harmless). 0, RESIHP_EINVAL or RESIHP_ENOMEM. */
int resihp__runmap_build(resihp__runmap_t *m, int nlayers,
                         const resihp__partition_t *parts, int nparts);
void resihp__runmap_free(resihp__runmap_t *m);
/* The run that starts at layer `first`, or -1. */
int resihp__runmap_find(const resihp__runmap_t *m, int first);
/* The runs rank k of partition p holds: [*r0, *r1). 0, or RESIHP_EINVAL
 * when p is not one of the map's partitions (one of its bounds starts no
 * run) or k is out of range. */
int resihp__runmap_rank_runs(const resihp__runmap_t *m,
                             const resihp__partition_t *p, int k, int *r0,
                             int *r1);
/* The fault-tolerant group of run r: its first layer. */
static inline int resihp__runmap_group(const resihp__runmap_t *m, int r) {
  return m->first[r];
}

/* The distinct partitions of n members, each given as its cut points'
 * text (texts[i]; NULL or "" for one rank holding everything): *parts
 * gets the distinct ones (*nparts, malloc'ed; free each with
 * resihp__partition_free, then the array) and of[i] the index of member
 * i's. O(n log n) string comparisons, at an epoch's set-up, never per
 * step. 0, RESIHP_EPROTO (a text that is no partition of nlayers) or
 * RESIHP_ENOMEM. */
int resihp__partitions_distinct(const char *const *texts, int n, int nlayers,
                                resihp__partition_t **parts, int *nparts,
                                int *of);
/* Whether replica id is in a GO's moved= list (ids whose partition the
 * coordinator changed in this epoch, ':'-separated, each in
 * [0, 2^24): control/coord_repart.c): 1, 0, or RESIHP_EPROTO when the
 * list is malformed. */
int resihp__moved_has(const char *list, int replica);
/* GO's shrunk= list: the ranks each shrunk replica lost in this epoch
 * (control/coord_shrink.c), "R:k,R:k,..." (replica id R < 2^24, its lost
 * rank k in its old numbering, k < RESIHP__SHRUNK_RANKS; several items
 * for several ranks or replicas, none twice; at most
 * RESIHP__SHRUNK_ITEMS). *dead gets replica's lost ranks as bits: 1 when
 * it is listed, 0 when not (*dead 0), or RESIHP_EPROTO when the list is
 * malformed (*dead 0). */
#define RESIHP__SHRUNK_RANKS 64
#define RESIHP__SHRUNK_ITEMS 64
int resihp__shrunk_get(const char *list, int replica, unsigned long long *dead);
/* The partitions of an epoch's n members as GO lists them (coordinator:
 * control/coord_layers.c): "D0,D1@r:r:...,..." where each Di is cut
 * points of at most k ranks (fewer: a replica that shrank,
 * control/coord_shrink.c), D0 held by every member not listed, each other one
 * with the replica ids that hold it (each a member, said once). ids: the
 * members, strictly increasing. *parts gets D0.. (*nparts, as
 * resihp__partitions_distinct), of[i] the index of member i's. O(text +
 * listed log n). 0, RESIHP_EPROTO or RESIHP_ENOMEM. */
int resihp__lparts_parse(const char *text, int nlayers, int k, const int *ids,
                         int n, resihp__partition_t **parts, int *nparts,
                         int *of);
/* The most ranks of a partition in such a text (each entry's cut points
 * + 1), at most bound, without parsing it: as resihp__lparts_parse's
 * partitions say when it accepts the text. O(text). */
int resihp__lparts_max_ranks(const char *text, int bound);
/* The group of run r: for each of n members (of[i] its partition among
 * parts), the rank that holds the run, into holder[i]. */
void resihp__runmap_holders(const resihp__runmap_t *m, int r,
                            const resihp__partition_t *parts, const int *of,
                            int n, int *holder);

/* Element offsets of the layers: off[l] = elems[0] + ... + elems[l-1],
 * off[0..L], malloc'ed. NULL when out of memory or the sum overflows. */
size_t *resihp__layers_offsets(const size_t *elems, int nlayers);

/* A piece of a catch-up: layers [first, end) of the receiving rank come
 * from rank `rank` of the source replica. */
typedef struct {
  int rank, first, end;
} resihp__layer_piece_t;

/* The pieces of layers [first, end) as the source's partition holds them:
 * one per source rank that holds some of them, in layer order, into out
 * (room for src->k). Returns how many, or RESIHP_EINVAL. */
int resihp__layers_sources(const resihp__partition_t *src, int first, int end,
                           resihp__layer_piece_t *out);

/* A catch-up plan: the layers of rank k of a replacement holding
 * partition parts[mine] come run by run from nh healthy members (src[i]
 * their member index, of[] every member's partition), run j of the rank
 * from src[(salt + j) % nh], so that the transfers of the ranks of one
 * replacement, and of several replacements (salt), spread over the
 * healthy replicas. Each piece is (member, rank there, layers [first,
 * end)), consecutive runs from the same rank merged, in layer order, into
 * out (room for the rank's runs). Returns how many, or RESIHP_EINVAL (no
 * healthy member, or a partition not in m). */
typedef struct {
  int member, rank, first, end;
} resihp__catchup_piece_t;
int resihp__catchup_plan(const resihp__runmap_t *m,
                         const resihp__partition_t *parts, const int *of,
                         int mine, int k, const int *src, int nh,
                         unsigned salt, resihp__catchup_piece_t *out);

#endif
