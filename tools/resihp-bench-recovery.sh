#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp-bench-recovery.sh: what step-level recovery buys, measured.
#
# Runs the example trainer three ways inside the current allocation
# (sbatch/salloc --no-kill) and prints one table:
#   1. resihp-run, no failure                      (the reference)
#   2. resihp-run with F rank kills                 (in-step recovery, spares)
#   3. checkpoint-restart: one plain srun step of R tasks, a checkpoint every
#      K steps, and after each failure the whole step is started again from
#      the last checkpoint (same F kills at the same steps).
# Failures are spread evenly (step i*N/(F+1)); they hit replicas 0,1,0,1...
# Both sides see the failure at once (socket errors; srun --kill-on-bad-exit
# ends the baseline's step), so the baseline is not charged Slurm's tens of
# seconds of node-failure detection nor any queueing: it is a lower bound
# of what checkpoint-restart costs.
#
# usage: resihp-bench-recovery.sh [--replicas R] [--spares S] [--steps N]
#          [--failures F] [--checkpoint-every K] [--microbatches M]
#          [--mb-ms MS] [--node-detect-s S] [--bindir DIR] [--trainer PATH]
# --node-detect-s (default 28) only feeds the modelled line at the end.
set -u
R=2 S=2 N=60 F=3 K=20 M=12 MBMS=5 NODE_DETECT_S=28
BINDIR=$(cd "$(dirname "$0")" && pwd)
TRAINER=""
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) R=$2; shift ;;
    --spares) S=$2; shift ;;
    --steps) N=$2; shift ;;
    --failures) F=$2; shift ;;
    --checkpoint-every) K=$2; shift ;;
    --microbatches) M=$2; shift ;;
    --mb-ms) MBMS=$2; shift ;;
    --node-detect-s) NODE_DETECT_S=$2; shift ;;
    --bindir) BINDIR=$2; shift ;;
    --trainer) TRAINER=$2; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "resihp-bench-recovery: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done
RUN=$BINDIR/resihp-run
[ -n "$TRAINER" ] || TRAINER=$BINDIR/../contrib/trainer/resihp-trainer
for x in "$RUN" "$TRAINER"; do
  [ -x "$x" ] || { echo "resihp-bench-recovery: $x not found (use --bindir/--trainer)" >&2; exit 1; }
done
[ -n "${SLURM_JOB_ID:-}" ] || { echo "resihp-bench-recovery: run it inside an allocation: salloc --no-kill -N$((R + S)) $0" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/resihp-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
TARGS="--steps $N --microbatches $M --mb-ms $MBMS --print-every 0 --quiet"
steps=(); inject=""
for ((i = 1; i <= F; i++)); do
  s=$((i * N / (F + 1))); steps+=("$s")
  inject+="${inject:+,}kill-rank:$(((i - 1) % R))@$s"
done
now() { echo "$EPOCHREALTIME"; }
elapsed() { echo "$2 - $1" | bc; }

# 1-2: resihp-run
t0=$(now); "$RUN" --quiet --replicas "$R" --spares "$S" -- "$TRAINER" $TARGS > "$work/ref" 2>"$work/ref.err"; rc_ref=$?; t1=$(now)
w_ref=$(elapsed "$t0" "$t1")
t0=$(now); "$RUN" --quiet --replicas "$R" --spares "$S" --inject "$inject" -- "$TRAINER" $TARGS > "$work/ft" 2>"$work/ft.err"; rc_ft=$?; t1=$(now)
w_ft=$(elapsed "$t0" "$t1")

# 3: checkpoint-restart
nodes=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n "$R" | paste -sd,)
head -c 32 /dev/urandom > "$work/secret"; chmod 600 "$work/secret"
ck=$work/ckpt; mkdir -p "$ck"
attempts=0
t0=$(now)
while [ ! -e "$ck/done" ] && [ $attempts -le $((F + 3)) ]; do
  attempts=$((attempts + 1))
  RESIHP_ATTEMPT=$attempts RESIHP_SECRET_FILE=$work/secret \
    srun --quiet -N "$R" -n "$R" -w "$nodes" --kill-on-bad-exit=1 --input=none \
    "$TRAINER" $TARGS --checkpoint "$ck" --checkpoint-every "$K" --die-at "$(IFS=,; echo "${steps[*]}")" \
    > "$work/cr.$attempts" 2>&1
done
t1=$(now)
w_cr=$(elapsed "$t0" "$t1")
cr_sum=$(grep -ho 'final checksum [0-9a-f]*' "$work"/cr.* | awk '{print $3}' | tail -1)

res() { awk '/final result:/ {print $3}' "$1"; }
echo "resihp-bench-recovery: $R replicas x $M microbatches x $N steps (${MBMS} ms per microbatch), $S spare(s), $F rank kill(s) at steps ${steps[*]}, checkpoint every $K steps"
printf '  %-44s %8.2f s  %7.2f steps/s  checksum %s\n' "resihp-run, no failure" "$w_ref" "$(echo "$N / $w_ref" | bc -l)" "$(res "$work/ref")"
printf '  %-44s %8.2f s  %7.2f steps/s  checksum %s\n' "resihp-run, $F failure(s)" "$w_ft" "$(echo "$N / $w_ft" | bc -l)" "$(res "$work/ft")"
printf '  %-44s %8.2f s  %7.2f steps/s  checksum %s (%d attempts)\n' "checkpoint-restart, $F failure(s)" "$w_cr" "$(echo "$N / $w_cr" | bc -l)" "${cr_sum:-none}" "$attempts"
grep -E "failure [0-9]+:|worst" "$work/ft" | sed 's/^ */  resihp-run: /'
printf '  effective throughput, resihp-run vs checkpoint-restart: %.2fx (measured here)\n' "$(echo "$w_cr / $w_ft" | bc -l)"
# What the baseline cannot avoid on a real node failure: Slurm notices a
# dead node only after SlurmdTimeout (~28 s measured on these machines with
# SlurmdTimeout=10), and only then can the job be restarted. A model, not a
# measurement: printed as such.
printf '  modelled, if each failure were a node failure that Slurm must notice first (+%s s each): %.2fx\n' \
  "$NODE_DETECT_S" "$(echo "($w_cr + $F * $NODE_DETECT_S) / $w_ft" | bc -l)"
ok=0
[ "$rc_ref" = 0 ] && [ "$rc_ft" = 0 ] && [ -e "$ck/done" ] || { echo "  a run failed (resihp-run $rc_ref/$rc_ft, checkpoint-restart done: $([ -e "$ck/done" ] && echo yes || echo no))"; ok=1; }
if [ "$(res "$work/ref")" != "$(res "$work/ft")" ] || [ "$(res "$work/ref")" != "$cr_sum" ]; then
  echo "  checksums differ"; ok=1
else
  echo "  all three runs end with bitwise identical parameters"
fi
exit $ok
