/* SPDX-License-Identifier: BSD-3-Clause */
/* The standalone driver shared by the fuzz targets (see README): without
 * libFuzzer, a target's main() calls resihp_fuzz_main(), which feeds
 * LLVMFuzzerTestOneInput every file on the command line (or, under
 * `make check`, every file of $top_srcdir/tests/fuzz/CORPUS) and then
 * RESIHP_FUZZ_RUNS (default 20000) inputs from gen, seeded by
 * RESIHP_FUZZ_SEED. */
#ifndef RESIHP_TESTS_FUZZ_DRIVER_H
#define RESIHP_TESTS_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reproducible pseudo-random numbers (xorshift) for generators. */
uint64_t resihp_fuzz_rng(void);

/* Append up to parts atoms picked at random (and, when junk_one_in > 0,
 * a random byte instead of an atom one time in junk_one_in) to buf, which
 * holds n of cap bytes. Returns the new length. */
size_t resihp_fuzz_atoms(uint8_t *buf, size_t n, size_t cap,
                         const char *const *atoms, size_t natoms,
                         size_t parts, unsigned junk_one_in);

/* gen fills at most cap bytes and returns how many. max_len bounds what
 * is read from a corpus file. */
int resihp_fuzz_main(int argc, char **argv, const char *name,
                     const char *corpus, size_t max_len,
                     size_t (*gen)(uint8_t *buf, size_t cap));

#endif
