#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp-bench-failslow.sh: what fail-slow adaptation buys, measured.
#
# Runs the example trainer (variable-length data) as R replicas inside the
# current allocation (salloc --no-kill -N R+1: the last node is the spare)
# and slows the trainer on the last replica's node from outside by a
# factor F (a
# SIGSTOP/SIGCONT duty cycle by tests/harness/throttle with a 4 ms period,
# shorter than a microbatch, as a slow device slows every microbatch; the
# trainer is not told) for the whole run; with --inband instead by
# --inject slow-rank:R-1@0xF (the rank stretches its own microbatches, its
# communication is not slowed). For each F it prints, side by side, the
# training throughput (steps/s over the training, launch excluded) of
#   none      equal counts, no adaptation        (--assign even)
#   count     counts by speed                    (--assign count)
#   cost      resihp: by predicted cost          (--assign cost)
#   swap      by cost, then swap for the spare   (--assign cost --swap-cost 1)
# against the failure-free run and the ideal (R-1+1/F)/R of it (a replica
# F times slower still contributes 1/F of its speed), and checks that every
# run ends with the failure-free run's parameters, bitwise.
#
# usage: resihp-bench-failslow.sh [--replicas R] [--steps N]
#          [--microbatches M] [--mb-ms MS] [--data KIND] [--factors "1.5 2"]
#          [--inband] [--bindir DIR] [--trainer PATH] [--throttle PATH]
set -u
R=3 N=150 M=24 MBMS=4 DATA=longtail FACTORS="1.5 2" INBAND=0
BINDIR=$(cd "$(dirname "$0")" && pwd)
TRAINER="" THROTTLE=""
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) R=$2; shift ;;
    --steps) N=$2; shift ;;
    --microbatches) M=$2; shift ;;
    --mb-ms) MBMS=$2; shift ;;
    --data) DATA=$2; shift ;;
    --factors) FACTORS=$2; shift ;;
    --inband) INBAND=1 ;;
    --bindir) BINDIR=$2; shift ;;
    --trainer) TRAINER=$2; shift ;;
    --throttle) THROTTLE=$2; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "resihp-bench-failslow: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done
RUN=$BINDIR/resihp-run
[ -n "$TRAINER" ] || TRAINER=$BINDIR/../contrib/trainer/resihp-trainer
[ -n "$THROTTLE" ] || THROTTLE=$BINDIR/../tests/harness/throttle
for x in "$RUN" "$TRAINER" "$THROTTLE"; do
  [ -x "$x" ] || { echo "resihp-bench-failslow: $x not found (use --bindir/--trainer/--throttle)" >&2; exit 1; }
done
[ -n "${SLURM_JOB_ID:-}" ] || { echo "resihp-bench-failslow: run it inside an allocation: salloc --no-kill -N$((R + 1)) $0" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/resihp-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
TARGS="--steps $N --microbatches $M --mb-ms $MBMS --data $DATA --print-every 0 --quiet"
victim=$((R - 1))
# the node, not the replica: a replacement on the spare is not slow
vnode=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | sed -n "${R}p")
cat > "$work/victim" <<EOF
#!/bin/sh
for p in \$(pgrep -x "$(basename "$TRAINER" | cut -c1-15)"); do
  tr '\\0' '\\n' < /proc/\$p/environ 2>/dev/null | grep -qx SLURMD_NODENAME=$vnode && echo \$p
done
EOF
chmod +x "$work/victim"

# run NAME FACTOR RESIHP-RUN-ARGS...: FACTOR 1 = no slowdown
run() {
  local name=$1 f=$2 thr=""; shift 2
  if [ "$f" != 1 ] && [ "$INBAND" = 1 ]; then
    set -- "$@" --inject "slow-rank:$victim@0x$f"
  elif [ "$f" != 1 ]; then
    "$THROTTLE" -f "$f" -p 4 --pids-from "$work/victim" --refresh 100 -t 3600 > /dev/null 2>&1 &
    thr=$!
  fi
  "$RUN" --quiet --progress 0 --replicas "$R" --spares 1 "$@" -- "$TRAINER" $TARGS > "$work/$name" 2> "$work/$name.err"
  echo $? > "$work/$name.rc"
  if [ -n "$thr" ]; then kill -TERM "$thr" 2>/dev/null; wait "$thr" 2>/dev/null; fi
}
rate() { awk '/training time:/ {gsub(/\(/, "", $5); print $5}' "$work/$1"; }
res() { awk '/final result:/ {print $3}' "$work/$1"; }

run ref 1
ref_rate=$(rate ref)
how="node $vnode (replica $victim) slowed from outside"
[ "$INBAND" = 1 ] && how="replica $victim slowed in band (slow-rank)"
echo "resihp-bench-failslow: $R replicas x $M microbatches x $N steps, data $DATA (${MBMS} ms per microbatch on average), $how"
printf '  %-30s %8s steps/s\n' "failure-free" "$ref_rate"
bad=0
for f in $FACTORS; do
  run "none-$f" "$f" --assign even --swap-cost never
  run "count-$f" "$f" --assign count --swap-cost never
  run "cost-$f" "$f" --assign cost --swap-cost never
  run "swap-$f" "$f" --assign cost --swap-cost 1
  ideal=$(echo "$ref_rate * ($R - 1 + 1 / $f) / $R" | bc -l)
  printf '  slowed x%-4s ideal %6.2f steps/s |' "$f" "$ideal"
  for m in none count cost swap; do
    r=$(rate "$m-$f")
    printf ' %s %6.2f (%3.0f%%)' "$m" "${r:-0}" "$(echo "${r:-0} * 100 / $ideal" | bc -l)"
    [ "$(cat "$work/$m-$f.rc")" = 0 ] && [ "$(res "$m-$f")" = "$(res ref)" ] || { bad=1; echo; echo "  $m-$f: exit $(cat "$work/$m-$f.rc"), result $(res "$m-$f") (want $(res ref))"; }
  done
  echo
  grep -h "slow: " "$work/cost-$f" | sed "s/^ */    cost x$f: /"
  grep -h "slow: " "$work/swap-$f" | sed "s/^ */    swap x$f: /"
done
[ "$bad" = 0 ] && echo "  every run ends with the failure-free run's parameters, bitwise ($(res ref))"
exit $bad
