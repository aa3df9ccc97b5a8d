#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp-bench-failslow.sh: what fail-slow adaptation buys, measured.
#
# Runs the example trainer (variable-length data) as R replicas inside the
# current allocation (salloc --no-kill -N R+1: the last node is the spare),
# with resihp-run's default silence and hang bounds, and slows the trainer
# on the last replica's node from outside by a factor F once replica 0's
# trainer has reached step --onset (default N/3, the detector warm by
# then): a SIGSTOP/SIGCONT duty cycle by tests/harness/throttle with a
# 4 ms period, shorter than a microbatch, as a slow device slows every
# microbatch; with --quota a CPU quota (cgroup v1 cpu or v2 cpu.max on a
# cgroup the trainer is moved into) and the trainer computing
# (--mb-work, since a quota does not slow a sleep) - a quota of 1/F of a
# core, which slows nothing where the trainer gets less than that anyway
# (more busy processes than cores); with --inband by
# --inject slow-rank:R-1@ONSETxF (the rank stretches its own
# microbatches). The trainer is never told. For each F it prints, side by
# side, over the slowed window (the onset to the last step: steps/s from
# the trainer's own step lines as they come) the throughput of
#   none      equal counts, no adaptation        (--assign even)
#   count     counts by speed                    (--assign count)
#   cost      resihp: by predicted cost (quotas) (--assign cost)
#   swap      by cost, then swap for the spare   (--assign cost --swap-cost 1)
# against the ideal (R-1+1/F)/R of the failure-free run's over the same
# window (a replica F times slower still contributes 1/F of its speed;
# after a swap for a healthy spare more is possible), and the steps from
# the onset to the detector's alarm (its "slow" event, at the step judged);
# and checks that every run ends with the failure-free run's parameters,
# bitwise.
#
# usage: resihp-bench-failslow.sh [--replicas R] [--steps N] [--onset S]
#          [--microbatches M] [--mb-ms MS] [--mb-work KOPS] [--data KIND]
#          [--factors "1.5 2"] [--inband | --quota] [--bindir DIR]
#          [--trainer PATH] [--throttle PATH] [--keep]
# (--keep: leave the runs' outputs, ledgers and events in the work
# directory, and say where)
set -u
R=3 N=600 ONSET="" M=24 MBMS=4 KOPS=1000 DATA=longtail FACTORS="1.5 2" MODE=duty
BINDIR=$(cd "$(dirname "$0")" && pwd)
TRAINER="" THROTTLE="" KEEP=0
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) R=$2; shift ;;
    --steps) N=$2; shift ;;
    --onset) ONSET=$2; shift ;;
    --microbatches) M=$2; shift ;;
    --mb-ms) MBMS=$2; shift ;;
    --mb-work) KOPS=$2; shift ;;
    --data) DATA=$2; shift ;;
    --factors) FACTORS=$2; shift ;;
    --inband) MODE=inband ;;
    --quota) MODE=quota ;;
    --bindir) BINDIR=$2; shift ;;
    --trainer) TRAINER=$2; shift ;;
    --throttle) THROTTLE=$2; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "resihp-bench-failslow: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done
[ -n "$ONSET" ] || ONSET=$((N / 3))
RUN=$BINDIR/resihp-run
# installed beside resihp-run, or in a build tree
[ -n "$TRAINER" ] || TRAINER=$BINDIR/resihp-trainer
[ -x "$TRAINER" ] || TRAINER=$BINDIR/../contrib/trainer/resihp-trainer
[ -n "$THROTTLE" ] || THROTTLE=$BINDIR/../tests/harness/throttle
for x in "$RUN" "$TRAINER" "$THROTTLE"; do
  [ -x "$x" ] || { echo "resihp-bench-failslow: $x not found (use --bindir/--trainer/--throttle)" >&2; exit 1; }
done
[ -n "${SLURM_JOB_ID:-}" ] || { echo "resihp-bench-failslow: run it inside an allocation: salloc --no-kill -N$((R + 1)) $0" >&2; exit 1; }
[ "$ONSET" -gt 0 ] && [ "$ONSET" -lt $((N - 10)) ] || { echo "resihp-bench-failslow: --onset must be within the steps, 10 before the end" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/resihp-bench.XXXXXX")
cg=""
cleanup() {
  [ -n "$cg" ] && [ -d "$cg" ] && rmdir "$cg" 2>/dev/null
  if [ "$KEEP" = 1 ]; then echo "resihp-bench-failslow: the runs are in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
COMPUTE="--mb-ms $MBMS"
if [ "$MODE" = quota ]; then
  COMPUTE="--mb-work $KOPS"
  # a cgroup of our own: v1's cpu hierarchy, else v2's (cpu.max)
  if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then cg=/sys/fs/cgroup/cpu/resihp-bench.$$
  else cg=/sys/fs/cgroup/resihp-bench.$$; fi
  mkdir "$cg" || { echo "resihp-bench-failslow: cannot make the cgroup $cg (root, and a cpu controller, needed for --quota)" >&2; exit 1; }
fi
TARGS="--steps $N --microbatches $M $COMPUTE --data $DATA --print-every 1"
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

# the step replica 0's trainer said it finished last (empty: none yet)
step_of() { sed -n 's/^\[replica 0\] step \([0-9]*\) .*/\1/p' "$1" | tail -n 1; }
now() { date +%s.%N; }
# watch NAME FACTOR: at the onset, slow the victim down (outside modes) and
# note the step and the time; note the time of the last step; in
# $work/NAME.win: "ONSET_STEP T_ONSET T_END" (T_END 0: the run did not end)
watch() {
  local name=$1 f=$2 on t_on t_end=0 thr="" s p
  while :; do
    s=$(step_of "$work/$name")
    [ -n "$s" ] && [ "$s" -ge "$ONSET" ] && break
    [ -f "$work/$name.rc" ] && break
    sleep 0.02
  done
  t_on=$(now)
  if [ "$f" != 1 ] && [ "$MODE" = duty ]; then
    "$THROTTLE" -f "$f" -p 4 --pids-from "$work/victim" --refresh 100 -t 3600 > /dev/null 2>&1 &
    thr=$!
  elif [ "$f" != 1 ] && [ "$MODE" = quota ]; then
    for p in $("$work/victim"); do echo "$p" > "$cg/cgroup.procs"; done
    "$THROTTLE" -f "$f" -p 20 --cgroup "$cg" -t 3600 > /dev/null 2>&1 &
    thr=$!
  fi
  on=$(step_of "$work/$name")
  while [ ! -f "$work/$name.rc" ]; do
    [ "$(step_of "$work/$name")" = $((N - 1)) ] && { t_end=$(now); break; }
    sleep 0.02
  done
  echo "${on:-$ONSET} $t_on $t_end" > "$work/$name.win"
  while [ ! -f "$work/$name.rc" ]; do sleep 0.05; done
  if [ -n "$thr" ]; then kill -TERM "$thr" 2>/dev/null; wait "$thr" 2>/dev/null; fi
}

# run NAME FACTOR RESIHP-RUN-ARGS...: FACTOR 1 = no slowdown
run() {
  local name=$1 f=$2 w; shift 2
  [ "$f" != 1 ] && [ "$MODE" = inband ] && set -- "$@" --inject "slow-rank:$victim@${ONSET}x$f"
  rm -f "$work/$name.rc"
  watch "$name" "$f" &
  w=$!
  "$RUN" --progress 0 --replicas "$R" --spares 1 --events "$work/$name.events" --ledger "$work/$name.ledger" "$@" -- "$TRAINER" $TARGS > "$work/$name" 2> "$work/$name.err"
  echo $? > "$work/$name.rc"
  wait "$w"
}
# steps per second over the window
rate() { awk '$3 > $2 {printf "%.2f", ('"$N"' - 1 - $1) / ($3 - $2)}' "$work/$1.win"; }
# steps from the onset to the victim's first "slow" event at or after it
detect() {
  local on; on=$(awk '{print $1}' "$work/$1.win")
  grep '"event":"slow"' "$work/$1.events" 2>/dev/null | grep "\"replica\":$victim[,}]" |
    sed -n 's/.*"step":\([0-9]*\).*/\1/p' | awk -v o="$on" '$1 >= o {print $1 - o; exit}'
}
res() { awk '/final result:/ {print $3}' "$work/$1"; }

run ref 1
ref_rate=$(rate ref)
case $MODE in
  duty) how="node $vnode (replica $victim) slowed from outside (SIGSTOP/SIGCONT duty cycle)" ;;
  quota) how="node $vnode (replica $victim) slowed from outside by a CPU quota, the trainer computing (--mb-work $KOPS)" ;;
  inband) how="replica $victim slowed in band (slow-rank)" ;;
esac
echo "resihp-bench-failslow: $R replicas x $M microbatches x $N steps, data $DATA ($COMPUTE), $how from step $ONSET"
printf '  %-30s %8s steps/s over steps %s..%s\n' "failure-free" "${ref_rate:-?}" "$(awk '{print $1}' "$work/ref.win")" $((N - 1))
[ -n "$(detect ref)" ] && echo "  failure-free: replica $victim taken for slow $(detect ref) steps after step $ONSET"
bad=0
for f in $FACTORS; do
  run "none-$f" "$f" --assign even --swap-cost never
  run "count-$f" "$f" --assign count --swap-cost never
  run "cost-$f" "$f" --assign cost --swap-cost never
  run "swap-$f" "$f" --assign cost --swap-cost 1
  ideal=$(echo "${ref_rate:-0} * ($R - 1 + 1 / $f) / $R" | bc -l)
  printf '  slowed x%-4s ideal %6.2f steps/s |' "$f" "$ideal"
  for m in none count cost swap; do
    r=$(rate "$m-$f") d=$(detect "$m-$f")
    printf ' %s %6.2f (%3.0f%%, found in %s steps)' "$m" "${r:-0}" "$(echo "${r:-0} * 100 / ($ideal + 0.000001)" | bc -l)" "${d:--}"
    [ "$(cat "$work/$m-$f.rc")" = 0 ] && [ "$(res "$m-$f")" = "$(res ref)" ] || { bad=1; echo; echo "  $m-$f: exit $(cat "$work/$m-$f.rc"), result $(res "$m-$f") (want $(res ref))"; }
  done
  echo
  grep -h "slow: " "$work/cost-$f" | grep -v '^\[replica' | sed "s/^ */    cost x$f: /"
  grep -h "slow: \|swapped out\|nodes marked bad" "$work/swap-$f" | grep -v '^\[replica' | sed "s/^ */    swap x$f: /"
done
[ "$bad" = 0 ] && echo "  every run ends with the failure-free run's parameters, bitwise ($(res ref))"
exit $bad
