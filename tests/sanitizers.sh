#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Build a second tree in build-asan/ with AddressSanitizer and
# UndefinedBehaviorSanitizer (--enable-sanitizers) and run the Check unit
# tests there: above all the fault tests of the all-reduce and of recovery
# (real processes that die, hang or lose links, hostile frames), and the
# parsers of untrusted input. Prints one summary line per test and a total;
# exit status 0 only if they all pass with no report.
#
#   tests/sanitizers.sh                          # every unit test below
#   SAN_TESTS="test_allreduce" CK_RUN_CASE=faults tests/sanitizers.sh
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/contrib/dev/ensure-deps.sh"
ensure_deps || exit 1
export BUILD_DIR=${ASAN_BUILD_DIR:-$src/build-asan}
build_tree "$src" --enable-sanitizers >/dev/null || { echo "sanitizers: build failed" >&2; exit 1; }
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
SAN_TESTS=${SAN_TESTS:-test_core test_allreduce test_allreduce_kill test_shrink_race test_allreduce_small test_allreduce_cma test_fixed_fast test_recovery test_freerun test_job_failover test_coord_save test_coord_failover test_coord_slow_reader test_coord_fault_order test_coord_slow_run test_standby test_preauth test_coord_cost test_failslow test_run_secret test_run_slurm test_keeper test_catchup_serve test_repart test_repart_samples test_decide test_shrink test_layer_groups test_layer_comms test_job_save test_coord_scale test_record test_detector test_planner test_probe}
failed=0
for t in $SAN_TESTS; do
  make -C "$BUILD_DIR" -j"$(nproc)" "tests/unit/$t" >/dev/null 2>&1 ||
    { make -C "$BUILD_DIR" "tests/unit/$t" 2>&1 | tail -30; failed=$((failed + 1)); continue; }
  log=$BUILD_DIR/sanitizers-$t.log
  CK_DEFAULT_TIMEOUT=120 "$BUILD_DIR/tests/unit/$t" >"$log" 2>&1
  rc=$?
  reports=$(grep -cE 'ERROR: AddressSanitizer|runtime error:' "$log")
  summary=$(grep -E '^[0-9]+%: Checks' "$log" | tail -1)
  if [ $rc = 0 ] && [ "$reports" = 0 ]; then
    echo "sanitizers: $t PASS (${summary:-no summary}; 0 ASan/UBSan reports)"
  else
    grep -E -A12 "ERROR: AddressSanitizer|runtime error:|$t.c:[0-9]+:[FE]" "$log" | head -80
    echo "sanitizers: $t FAIL (${summary:-no summary}; $reports ASan/UBSan report(s); log: $log)"
    failed=$((failed + 1))
  fi
done
n=$(echo $SAN_TESTS | wc -w)
echo "sanitizers: $((n - failed)) passed, $failed failed"
[ "$failed" = 0 ]
