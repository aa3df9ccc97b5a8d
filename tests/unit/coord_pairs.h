/* SPDX-License-Identifier: BSD-3-Clause */
/* A real coordinator driven through its message handler over socket
 * pairs (connections adopted without a handshake), for the unit tests of
 * the coordinator's loop: coord_c is the coordinator, coord_k[i] replica
 * i's connection, coord_peer[i] the replica's end. */
#ifndef RESIHP_TESTS_COORD_PAIRS_H
#define RESIHP_TESTS_COORD_PAIRS_H

#include "../../libresihp/control/coord_internal.h"
#include "../../libresihp/control/coordinator.h"
#include "../../libresihp/control/wire.h"

#include <stddef.h>

#define COORD_PAIRS_MAX 8
extern resihp__coord_t *coord_c;
extern int coord_k[COORD_PAIRS_MAX];
extern resihp__wire_t coord_peer[COORD_PAIRS_MAX];

/* n replicas; on_fault/ud as in resihp__coord_opts_t (may be NULL). */
void coord_pairs_setup(int n,
                       int (*on_fault)(void *, int, const char *, const char *,
                                       long),
                       void *ud);
/* Checks the coordinator's invariants, then frees everything. */
void coord_pairs_teardown(void);
/* The next line replica i gets that starts with prefix (others skipped),
 * the coordinator polled meanwhile so that its queues move. */
void coord_pairs_expect(int i, const char *prefix, char *line, size_t cap);
/* Every replica joins (HELLO, BEGIN, GO, READY) and gets its START. */
void coord_pairs_join_all(void);

#endif
