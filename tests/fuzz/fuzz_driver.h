/* SPDX-License-Identifier: BSD-3-Clause */
/* The standalone driver shared by every fuzz target, so that
 * they build with gcc and run under `make check` (see README): every file
 * given on the command line, else the checked-in corpus directory under
 * $top_srcdir, then RESIHP_FUZZ_RUNS (default 20000) inputs made by the
 * target's generator from a seeded xorshift (RESIHP_FUZZ_SEED). A libFuzzer
 * build (-DRESIHP_FUZZ_LIBFUZZER) links it too, for resihp__fuzz_quiet, and
 * uses libFuzzer's main instead of resihp__fuzz_main. */
#ifndef RESIHP_TESTS_FUZZ_DRIVER_H
#define RESIHP_TESTS_FUZZ_DRIVER_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Silence the library's log: targets feed it garbage on purpose. */
void resihp__fuzz_quiet(void);

/* The driver's random numbers, for generators. */
uint64_t resihp__fuzz_rng(void);

/* Append up to parts atoms picked at random (and, when junk_one_in > 0,
 * a random byte instead of an atom one time in junk_one_in) to buf, which
 * holds n of cap bytes. Returns the new length. For grammar-shaped inputs. */
size_t resihp__fuzz_atoms(uint8_t *buf, size_t n, size_t cap,
                          const char *const *atoms, size_t natoms, size_t parts,
                          unsigned junk_one_in);

/* One time in one_in, pad buf (n of cap bytes) to cap with letters: an
 * overlong input. Returns the new length. */
size_t resihp__fuzz_pad_long(uint8_t *buf, size_t n, size_t cap,
                             unsigned one_in);

/* A well-formed input of len bytes (snprintf's answer) in buf of cap
 * bytes, cut to fit and, one time in two, one byte of it replaced by a
 * random one: names that are nearly right. Returns the length. */
size_t resihp__fuzz_near_miss(uint8_t *buf, int len, size_t cap);

/* The input as a C string: a malloc'ed copy with a NUL after its size
 * bytes (NULL when out of memory; free it). Targets of parsers that read
 * up to a NUL. */
char *resihp__fuzz_cstr(const uint8_t *data, size_t size);

/* The same into dst (cap bytes): at most cap - 1 bytes of the input, then
 * a NUL. Returns how many were copied. For parsers with a bounded line. */
size_t resihp__fuzz_cstr_in(char *dst, size_t cap, const uint8_t *data,
                            size_t size);

/* gen fills at most cap bytes and returns how many. */
int resihp__fuzz_main(int argc, char **argv, const char *name,
                      const char *corpus, size_t max_len,
                      size_t (*gen)(uint8_t *buf, size_t cap), long runs);

#endif
