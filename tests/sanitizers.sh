#!/bin/bash
# Build a second tree in build-asan/ with AddressSanitizer and
# UndefinedBehaviorSanitizer (--enable-sanitizers) and run the all-reduce
# fault tests there (real processes that die, hang or lose links, hostile
# frames). Prints one summary line; exit status 0 only if they all pass.
#
#   tests/sanitizers.sh            # all of test_allreduce
#   CK_RUN_CASE=faults tests/sanitizers.sh
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/contrib/dev/ensure-deps.sh"
ensure_deps || exit 1
export BUILD_DIR=${ASAN_BUILD_DIR:-$src/build-asan}
build_tree "$src" --enable-sanitizers >/dev/null || { echo "sanitizers: build failed" >&2; exit 1; }
make -C "$BUILD_DIR" -j"$(nproc)" tests/unit/test_allreduce >/dev/null 2>&1 ||
  { make -C "$BUILD_DIR" tests/unit/test_allreduce 2>&1 | tail -30; exit 1; }
# Forked children that are SIGKILLed leak by design; everything else must
# be clean. Any ASan/UBSan report aborts the process that hit it, which the
# test harness sees as a failed rank.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
log=$BUILD_DIR/sanitizers.log
CK_DEFAULT_TIMEOUT=120 "$BUILD_DIR/tests/unit/test_allreduce" >"$log" 2>&1
rc=$?
reports=$(grep -cE 'ERROR: AddressSanitizer|runtime error:' "$log")
summary=$(grep -E '^[0-9]+%: Checks' "$log" | tail -1)
if [ $rc = 0 ] && [ "$reports" = 0 ]; then
  echo "sanitizers: PASS (${summary:-no summary}; 0 ASan/UBSan reports)"
  exit 0
fi
grep -E -A12 'ERROR: AddressSanitizer|runtime error:|test_allreduce.c:[0-9]+:[FE]' "$log" | head -80
echo "sanitizers: FAIL (${summary:-no summary}; $reports ASan/UBSan report(s); log: $log)"
exit 1
