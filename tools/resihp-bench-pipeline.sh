#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp-bench-pipeline.sh: what fault tolerance costs a pipeline-parallel
# job when nothing fails, measured.
#
# Trains the pipeline example (contrib/pipeline-trainer) as R replicas of
# K pipeline stages, one rank per node, inside the current allocation
# (salloc --no-kill -N R*K), two ways on the same nodes:
#   1. resihp-run --replicas R --ranks-per-replica K --nodes-per-replica K:
#      fault-tolerant gradient exchange per stage, step boundaries with the
#      coordinator, catch-up ready;
#   2. --plain: one plain srun step of R*K tasks, plain communicators
#      (unprotected all-reduce per stage, p2p between stages), no
#      coordinator: what the same training costs without fault tolerance;
# each with int64 fixed-point gradients and with float32 ones (--float),
# and prints the step times side by side. The fixed-point runs must end
# with the same parameters (checksums): the table says so.
# On a lab cluster (tests/harness/lab-cluster.sh) started and torn down
# for it: contrib/demo/run-pipeline-bench.sh.
#
# usage: resihp-bench-pipeline.sh [--replicas R] [--stages K] [--steps N]
#          [--microbatches M] [--mb-ms MS] [--bindir DIR] [--trainer PATH]
#          [-- TRAINER-ARGS...]
set -u
R=2 K=2 N=100 M=12 MBMS=0
BINDIR=$(cd "$(dirname "$0")" && pwd)
TRAINER=""
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) R=$2; shift ;;
    --stages) K=$2; shift ;;
    --steps) N=$2; shift ;;
    --microbatches) M=$2; shift ;;
    --mb-ms) MBMS=$2; shift ;;
    --bindir) BINDIR=$2; shift ;;
    --trainer) TRAINER=$2; shift ;;
    --) shift; break ;;
    -h|--help) awk 'NR > 2 && !/^#/ {exit} NR > 2 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "resihp-bench-pipeline: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done
RUN=$BINDIR/resihp-run
[ -n "$TRAINER" ] || TRAINER=$BINDIR/../contrib/pipeline-trainer/resihp-pipeline-trainer
for x in "$RUN" "$TRAINER"; do
  [ -x "$x" ] || { echo "resihp-bench-pipeline: $x not found (use --bindir/--trainer)" >&2; exit 1; }
done
[ -n "${SLURM_JOB_ID:-}" ] || { echo "resihp-bench-pipeline: run it inside an allocation: salloc --no-kill -N$((R * K)) $0" >&2; exit 1; }
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n $((R * K)))
[ "$(echo "$nodes" | wc -l)" -ge $((R * K)) ] || { echo "resihp-bench-pipeline: $R replicas x $K stages need $((R * K)) nodes" >&2; exit 1; }
nodes=$(echo "$nodes" | paste -sd,)

work=$(mktemp -d "${TMPDIR:-/tmp}/resihp-bench-pipeline.XXXXXX")
trap 'rm -rf "$work"' EXIT
head -c 32 /dev/urandom > "$work/secret"; chmod 600 "$work/secret"
TARGS="--steps $N --microbatches $M --mb-ms $MBMS --stages $K --print-every 0 --quiet $*"
ok=0
# resihp-run's summary: "training time: X s (Y steps/s, ...; median step Z ms)"
ft() { # NAME ARGS...
  local n=$1; shift
  "$RUN" --quiet --replicas "$R" --ranks-per-replica "$K" --nodes-per-replica "$K" -- \
    "$TRAINER" $TARGS "$@" > "$work/$n" 2> "$work/$n.err" || { echo "  resihp-run $n failed: $(tail -3 "$work/$n.err")"; ok=1; }
  ft_mean=$(awk -v n="$N" '/training time:/ {printf "%.2f", 1000 * $3 / n}' "$work/$n")
  ft_median=$(sed -n 's/.*median step \([0-9.]*\) ms.*/\1/p' "$work/$n")
  ft_sum=$(awk '/final result:/ {print $3}' "$work/$n")
}
plain() { # NAME ARGS...
  local n=$1; shift
  mkdir -p "$work/$n.dir"
  RESIHP_SECRET_FILE=$work/secret srun --quiet -N $((R * K)) -n $((R * K)) --ntasks-per-node=1 \
    -w "$nodes" --kill-on-bad-exit=1 --input=none \
    "$TRAINER" $TARGS "$@" --plain "$work/$n.dir" > "$work/$n" 2> "$work/$n.err" || { echo "  plain $n failed: $(tail -3 "$work/$n.err")"; ok=1; }
  pl_mean=$(sed -n 's/.*mean step \([0-9.]*\) ms.*/\1/p' "$work/$n")
  pl_sum=$(awk '/final result:/ {print $3}' "$work/$n")
}
echo "resihp-bench-pipeline: $R replicas x $K pipeline stages (one rank per node), $M microbatches x $N steps (${MBMS} ms per microbatch and stage), no failure"
printf '  %-10s %-34s %-30s %s\n' gradients "resihp-run (fault tolerant)" "plain srun step (no FT)" "FT overhead"
for dt in fixed float; do
  extra=(); [ $dt = float ] && extra=(--float)
  ft "ft-$dt" "${extra[@]}"
  plain "plain-$dt" "${extra[@]}"
  printf '  %-10s %-34s %-30s %s\n' "$dt" "${ft_mean:-?} ms/step (median ${ft_median:-?} ms)" \
    "${pl_mean:-?} ms/step" \
    "$( [ -n "$ft_mean" ] && [ -n "$pl_mean" ] && awk -v a="$ft_mean" -v b="$pl_mean" 'BEGIN {printf "%+.1f %%", 100 * (a - b) / b}')"
  if [ $dt = fixed ]; then
    if [ -n "$ft_sum" ] && [ "$ft_sum" = "$pl_sum" ]; then
      echo "             both end with the same parameters, stage by stage: $ft_sum"
    else
      echo "             checksums differ: resihp-run '${ft_sum:-none}', plain '${pl_sum:-none}'"; ok=1
    fi
  fi
done
echo "  (resihp-run: its training time over $N steps, step boundaries with the coordinator included; plain: task 0's time from its first to its last step)"
exit $ok
