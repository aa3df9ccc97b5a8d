#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Run every resihp test: installs missing Debian packages (as root), builds
# with warnings as errors, runs the Check unit tests and the integration tests
# on a real local Slurm cluster (`make check`), then prints one summary line.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
. "$src/contrib/dev/ensure-deps.sh"
ensure_deps || exit 1
build=${BUILD_DIR:-$src/build}
build_tree "$src" --enable-werror || exit 1
make -C "$build" -j"$(nproc)" check >"$build/check.out" 2>&1
rc=$?
grep -E '^(PASS|FAIL|SKIP|ERROR|XPASS|XFAIL):' "$build/check.out"
if [ $rc != 0 ]; then
  for f in $(grep -l -E '^:test-result: (FAIL|ERROR)' $(find "$build/tests" -name '*.trs') 2>/dev/null); do
    echo "---- ${f%.trs}.log"; tail -n 60 "${f%.trs}.log"
  done
fi
count() { awk -v k="# $1:" 'index($0,k)==1 {s+=$NF} END {print s+0}' "$build/test-suite.log"; }
pass=$(count PASS); fail=$(( $(count FAIL) + $(count ERROR) + $(count XPASS) )); skip=$(count SKIP)
[ $rc != 0 ] && [ "$fail" = 0 ] && fail=1 # make itself failed (build, harness)
echo "tests: $pass passed, $fail failed, $skip skipped"
[ "$fail" = 0 ]
