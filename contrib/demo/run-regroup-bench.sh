#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Regroup benchmark on a lab cluster (issue 32): builds resihp, starts a
# real Slurm cluster of R*K+K nodes on this machine
# (tests/harness/lab-cluster.sh, the plugin in its plugstack) and runs
# tools/resihp-bench-regroup.sh inside an allocation of all of them:
# failure-free with and without layer-keyed groups, one stage slowed from
# outside (absorb, swap, repartition, the planner's choice), a node killed
# from outside with no spare (drop vs regroup), side by side. Nodes are
# killed with the lab's killnode. Always stops the cluster on exit. Run as
# root.
# Env: R (3), K (3), STEPS (200), MB_MS (10), SLURMD_TIMEOUT (the lab's,
# 10); KEEP_LAB=1 keeps the files; BENCH_ARGS: more options for the bench
# (e.g. "--only C --slurm-verdict", see resihp-bench-regroup.sh --help).
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
demo=run-regroup-bench
. "$src/contrib/dev/demo-lab.sh"
B=$src/build
R=${R:-3} K=${K:-3} STEPS=${STEPS:-200} MB_MS=${MB_MS:-10}
export NNODES=$((R * K + K))
# throttle (tests/harness) is built for `make check`, not by default
make -C "$B" tests/harness/throttle >/dev/null || exit 1
PLUGSTACK_LINE="required $B/spank/.libs/resihp.so" cluster start || exit 1
eval "$(cluster env)"
cd "$LAB" || exit 1
# the lab's nodes share this machine's CPUs: a spare's burn-in measured
# while the job trains says nothing about the node (as in the lab tests)
export RESIHP_NO_BURN_IN=1
step "resihp-bench-regroup: $R replicas x $K stages on $NNODES nodes"
# shellcheck disable=SC2086
salloc -Q --no-kill -N"$NNODES" "$src/tools/resihp-bench-regroup.sh" \
  --bindir "$B/tools" \
  --trainer "$B/contrib/pipeline-trainer/resihp-pipeline-trainer" \
  --throttle "$B/tests/harness/throttle" \
  --kill-node-cmd "env LAB=$LAB $src/tests/harness/lab-cluster.sh killnode %n" \
  --replicas "$R" --stages "$K" --steps "$STEPS" --mb-ms "$MB_MS" ${BENCH_ARGS:-}
