#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Pipeline benchmark on a lab cluster: builds resihp, starts a real Slurm
# cluster of R*K nodes on this machine (tests/harness/lab-cluster.sh, the
# plugin in its plugstack) and runs tools/resihp-bench-pipeline.sh inside
# an allocation of all of them: the pipeline trainer under resihp-run
# (--ranks-per-replica K) and as a plain srun step, step times side by
# side. Always stops the cluster on exit. Run as root.
# Env: R (2), K (2), STEPS (100), MB_MS (0); KEEP_LAB=1 keeps the files.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
demo=run-pipeline-bench
. "$src/contrib/dev/demo-lab.sh"
B=$src/build
R=${R:-2} K=${K:-2} STEPS=${STEPS:-100} MB_MS=${MB_MS:-0}
export NNODES=$((R * K))
PLUGSTACK_LINE="required $B/spank/.libs/resihp.so" cluster start || exit 1
eval "$(cluster env)"
cd "$LAB" || exit 1
step "resihp-bench-pipeline: $R replicas x $K stages on $NNODES nodes"
salloc -Q --no-kill -N"$NNODES" "$src/tools/resihp-bench-pipeline.sh" \
  --bindir "$B/tools" \
  --trainer "$B/contrib/pipeline-trainer/resihp-pipeline-trainer" \
  --replicas "$R" --stages "$K" --steps "$STEPS" --mb-ms "$MB_MS"
