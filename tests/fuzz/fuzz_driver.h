/* SPDX-License-Identifier: BSD-3-Clause */
/* What a transport fuzz target gives the shared standalone driver
 * (fuzz_driver.c): its name (the corpus is tests/fuzz/corpus-<name>/) and
 * a generator of inputs shaped like its wire format. Under libFuzzer the
 * driver is not linked; only LLVMFuzzerTestOneInput is. */
#ifndef RESIHP_FUZZ_DRIVER_H
#define RESIHP_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

extern const char fuzz_name[];
/* Generated inputs per run unless RESIHP_FUZZ_RUNS says otherwise (a
 * target whose inputs cost more runs fewer). */
extern const long fuzz_default_runs;
/* Fill at most cap bytes of buf, drawing randomness from rng(); returns the
 * length. */
size_t fuzz_generate(uint8_t *buf, size_t cap, uint64_t (*rng)(void));

#endif
