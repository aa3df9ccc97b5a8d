#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp-bench-regroup.sh: what regrouping a pipeline job's parallelism
# inside the running job buys (issue 32), measured side by side in one run.
#
# Trains the pipeline example (contrib/pipeline-trainer) as R replicas of
# K stages, one rank per node, under resihp-run with its default bounds
# (silence and hang), inside the current allocation (salloc --no-kill -N
# R*K+K: R*K nodes for the replicas, K for a spare replica; C's second
# run takes the spare's place of the replica C's first run lost):
#  A. failure-free steps/s without and with --move-layers (the layer-keyed
#     groups), interleaved --repeat times: their cost when nothing fails.
#  B. stage 1 of replica 1 slowed by F (each of --factors) from outside,
#     from step --onset on: a SIGSTOP/SIGCONT duty cycle (tests/harness/
#     throttle, 4 ms period) on that one process, which the trainer's
#     simulated compute (sleeping in short slices) feels and the machine's
#     load does not bound. Four policies:
#       absorb   no --move-layers, no spare, --swap-cost never
#       swap     no --move-layers, a spare, --swap-cost 0 (always worth it)
#       repart   --move-layers, no spare, --swap-cost never
#       chosen   --move-layers, a spare, the default swap cost: the planner's
#                choice (the coordinator's decision and outcome events)
#     each as % of ideal = failure-free x (R*K - 1 + 1/F)/(R*K) (the slow
#     rank still gives 1/F of its speed; the failure-free run is A's
#     without --move-layers).
#  C. the node of replica 1's stage 1 killed from outside at step --onset
#     (--kill-node-cmd, e.g. the lab's killnode), no spare: drop (the
#     program without --move-layers: the replica is given up) vs regroup
#     (--move-layers: the replica shrinks in place to K-1 stages). resihp-run
#     waits for Slurm's verdict on a node killed from outside; the bench
#     sets the node DOWN (scontrol) once resihp-run says it waits, as
#     SlurmdTimeout would later (--slurm-verdict: leave it to Slurm). A run
#     uses the first R*K nodes of the allocation that it may
#     (SLURM_JOB_NODELIST narrowed for resihp-run): after a kill, none of
#     the lost replica's, which Slurm holds for its step.
# Throughput is steps/s over the steps from the onset to the last, timed
# by replica 0's last stage's own step lines as they come (never the
# whole run: start-up is not in it); C also from the shrunk replica's
# catch-up to the end. Every run must end with the parameters of one
# process training alone (--reference), bitwise: the bench checks and
# prints it. Goals (issue 32) are printed next to the figures, met or not.
# On a lab cluster started and torn down for it:
# contrib/demo/run-regroup-bench.sh.
#
# usage: resihp-bench-regroup.sh [--replicas R] [--stages K] [--steps N]
#          [--onset S] [--microbatches M] [--mb-ms MS] [--layers L]
#          [--factors "1.5 2"] [--repeat N] [--kill-node-cmd CMD]
#          [--slurm-verdict] [--only A|B|C] [--lockstep] [--bindir DIR]
#          [--trainer PATH] [--throttle PATH] [--keep]
# Defaults: 3 replicas x 3 stages, 200 steps, onset N/4, 36 microbatches
# (12 a replica), --mb-ms 10 (steps of ~0.2 s, so that the per-step work of
# the coordinator and the lab's shared CPUs does not dominate), 9 hidden
# layers (11 units to move), factors 1.5 and 2, --repeat 3.
# (--kill-node-cmd: run without a shell, %n the node, as resihp-run's;
# without it C is skipped. --lockstep: every step through the
# coordinator (the default is the product's: free runs). --only: one
# section (A is always run: B and C are measured against it). --keep:
# leave the runs' outputs, ledgers and events, and say where.)
set -u
R=3 K=3 N=200 ONSET="" M=36 MBMS=10 L=9 FACTORS="1.5 2" REPEAT=3
KILLCMD="" VERDICT=bench ONLY="" LOCKSTEP="" KEEP=0
BINDIR=$(cd "$(dirname "$0")" && pwd)
TRAINER="" THROTTLE=""
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) R=$2; shift ;;
    --stages) K=$2; shift ;;
    --steps) N=$2; shift ;;
    --onset) ONSET=$2; shift ;;
    --microbatches) M=$2; shift ;;
    --mb-ms) MBMS=$2; shift ;;
    --layers) L=$2; shift ;;
    --factors) FACTORS=$2; shift ;;
    --repeat) REPEAT=$2; shift ;;
    --kill-node-cmd) KILLCMD=$2; shift ;;
    --slurm-verdict) VERDICT=slurm ;;
    --only) ONLY=$2; shift ;;
    --lockstep) LOCKSTEP=--lockstep ;;
    --bindir) BINDIR=$2; shift ;;
    --trainer) TRAINER=$2; shift ;;
    --throttle) THROTTLE=$2; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) awk 'NR > 2 && !/^#/ {exit} NR > 2 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "resihp-bench-regroup: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done
me=resihp-bench-regroup
[ -n "$ONSET" ] || ONSET=$((N / 4))
RUN=$BINDIR/resihp-run
[ -n "$TRAINER" ] || TRAINER=$BINDIR/resihp-pipeline-trainer
[ -x "$TRAINER" ] || TRAINER=$BINDIR/../contrib/pipeline-trainer/resihp-pipeline-trainer
[ -n "$THROTTLE" ] || THROTTLE=$BINDIR/../tests/harness/throttle
for x in "$RUN" "$TRAINER" "$THROTTLE"; do
  [ -x "$x" ] || { echo "$me: $x not found (use --bindir/--trainer/--throttle)" >&2; exit 1; }
done
case $ONLY in ""|A|B|C) ;; *) echo "$me: --only wants A, B or C" >&2; exit 1 ;; esac
[ "$K" -ge 2 ] && [ "$R" -ge 2 ] || { echo "$me: at least 2 replicas of 2 stages" >&2; exit 1; }
[ "$ONSET" -ge 10 ] && [ "$ONSET" -lt $((N - 20)) ] || { echo "$me: --onset must be 10 steps in and 20 before the end" >&2; exit 1; }
NN=$((R * K))
[ -n "${SLURM_JOB_ID:-}" ] || { echo "$me: run it inside an allocation: salloc --no-kill -N$((NN + K)) $0" >&2; exit 1; }
mapfile -t all < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
[ "${#all[@]}" -ge "$NN" ] || { echo "$me: $R replicas x $K stages need $NN nodes (and $K more for a spare)" >&2; exit 1; }
dead=" "  # nodes killed by section C (never used again)

work=$(mktemp -d "${TMPDIR:-/tmp}/$me.XXXXXX")
thr=""
cleanup() {
  [ -n "$thr" ] && kill -TERM "$thr" 2>/dev/null
  if [ "$KEEP" = 1 ]; then echo "$me: the runs are in $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
# the duty cycle's throttle at a real-time priority where it may (root):
# on a busy machine a throttle scheduled late leaves its target stopped
# for tens of ms, a factor far above F
RT=""
chrt -f 10 true 2>/dev/null && RT="chrt -f 10"
TARGS="--steps $N --microbatches $M --mb-ms $MBMS --layers $L --stages $K --print-every 1"

# the allocation's live nodes, the first NEED of them, comma-separated
live() {
  local n out=() need=$1
  for n in "${all[@]}"; do
    case $dead in *" $n "*) continue ;; esac
    out+=("$n")
    [ "${#out[@]}" -ge "$need" ] && break
  done
  [ "${#out[@]}" -ge "$need" ] || return 1
  (IFS=,; echo "${out[*]}")
}
# every line of the run's output with the time it came (EPOCHREALTIME)
stamp() { local l; while IFS= read -r l; do printf '%s %s\n' "$EPOCHREALTIME" "$l"; done; }
# the step replica 0's last stage said it finished last (empty: none yet)
step_of() { sed -n 's/^[0-9.]* \[replica 0 stage '$((K - 1))'\] step \([0-9]*\) .*/\1/p' "$1" | tail -n 1; }
# the time replica 0's last stage finished step S
time_of() { awk -v p="[replica 0 stage $((K - 1))] step $2 " 'index($0, p) == index($0, " ") + 1 {print $1; exit}' "$work/$1"; }

# the victim: stage 1 of replica 1, on its own node (a spare that replaces
# it is healthy), found by its environment
victim_node() { echo "$1" | cut -d, -f$((K + 2)); }
write_pids() { # FILE NODE
  cat > "$1" <<EOF
#!/bin/sh
for p in \$(pgrep -x "$(basename "$TRAINER" | cut -c1-15)"); do
  env=\$(tr '\\0' '\\n' < /proc/\$p/environ 2>/dev/null)
  echo "\$env" | grep -qx SLURMD_NODENAME=$2 && echo "\$env" | grep -qx RESIHP_REPLICA=1 && echo \$p
done
EOF
  chmod +x "$1"
}

# watch NAME WHAT NODE: at replica 0's step ONSET, slow the victim by
# WHAT (a factor), or kill its node (WHAT kill), from outside
watch() {
  local name=$1 what=$2 node=$3 s
  while :; do
    s=$(step_of "$work/$name")
    [ -n "$s" ] && [ "$s" -ge "$ONSET" ] && break
    [ -f "$work/$name.rc" ] && return
    sleep 0.02
  done
  case $what in
    1) ;;
    kill)
      local cmd=${KILLCMD//%n/$node}
      echo "$EPOCHREALTIME $me: killing node $node from outside: $cmd" >> "$work/$name.bench"
      $cmd >> "$work/$name.bench" 2>&1
      if [ "$VERDICT" = bench ]; then
        while [ ! -f "$work/$name.rc" ]; do
          grep -q "no healthy spare; waiting up to .* s for Slurm" "$work/$name" && {
            echo "$EPOCHREALTIME $me: node $node set DOWN (as SlurmdTimeout would)" >> "$work/$name.bench"
            scontrol update nodename="$node" state=down reason=resihp-bench-regroup >> "$work/$name.bench" 2>&1
            break; }
          sleep 0.05
        done
      fi ;;
    *)
      write_pids "$work/$name.pids" "$node"
      $RT "$THROTTLE" -f "$what" -p 4 --pids-from "$work/$name.pids" --refresh 1000 -t 3600 > /dev/null 2>&1 &
      thr=$!
      while [ ! -f "$work/$name.rc" ]; do sleep 0.1; done
      kill -TERM "$thr" 2>/dev/null; wait "$thr" 2>/dev/null; thr="" ;;
  esac
}

# settle NODES: no step of an earlier run is left on NODES (a step that
# had a node killed under it holds its other nodes until Slurm knows it
# ended there, which the nodes C sets aside), at most 120 s
settle() {
  local i id nl busy
  for ((i = 0; i < 600; i++)); do
    busy=""
    while read -r id nl; do
      case $id in *extern*|*interactive*|*batch*|"") continue ;; esac
      for n in $(scontrol show hostnames "$nl" 2>/dev/null); do
        case ",$1," in *",$n,"*) busy=1 ;; esac
      done
    done < <(squeue -h -s -j "$SLURM_JOB_ID" -o '%i %N' 2>/dev/null)
    [ -z "$busy" ] && return 0
    sleep 0.2
  done
  echo "  ($me: steps of an earlier run still hold nodes of $1 after 120 s)"
}

# run NAME WHAT NODES RESIHP-RUN-ARGS... [-- TRAINER-ARGS...]
run() {
  local name=$1 what=$2 nodes=$3 w a=() t=(); shift 3
  settle "$nodes"
  while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done
  [ $# -gt 0 ] && { shift; t=("$@"); }
  rm -f "$work/$name.rc"
  watch "$name" "$what" "$(victim_node "$nodes")" &
  w=$!
  SLURM_JOB_NODELIST=$nodes "$RUN" --progress 0 $LOCKSTEP --replicas "$R" --nodes-per-replica "$K" \
    --ranks-per-replica "$K" --events "$work/$name.events" --ledger "$work/$name.ledger" \
    "${a[@]}" -- "$TRAINER" $TARGS "${t[@]}" 2>&1 | stamp > "$work/$name"
  echo "${PIPESTATUS[0]}" > "$work/$name.rc"
  wait "$w"
}
# steps/s from replica 0's step FROM to the last
rate() {
  local a b; a=$(time_of "$1" "${2:-$ONSET}") b=$(time_of "$1" $((N - 1)))
  [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v n=$((N - 1 - ${2:-$ONSET})) 'BEGIN {if (b > a) printf "%.3f", n / (b - a)}'
}
# slowed NAME: how much slower replica 1's stage 1 computed its
# microbatches than replica 0's after the onset (the trainers' mean
# microbatch times, less the steps before the onset, counted in the ledger)
slowed() {
  local v b pre
  v=$(sed -n 's/^[0-9.]* \[replica 1 stage 1\] microbatch times (\([0-9]*\)): mean \([0-9.]*\) ms.*/\1 \2/p' "$work/$1" | head -n 1)
  b=$(sed -n 's/^[0-9.]* \[replica 0 stage 1\] microbatch times (\([0-9]*\)): mean \([0-9.]*\) ms.*/\1 \2/p' "$work/$1" | head -n 1)
  pre=$(awk -v o="$ONSET" '$1 < o {for (i = 2; i <= NF; i++) n += $i == 1} END {print n + 0}' "$work/$1.ledger")
  echo "$v $b $pre" | awk 'NF == 5 && $1 > $5 && $4 > 0 {printf "%.2f", ($1 * $2 - $5 * $4) / (($1 - $5) * $4); exit} {printf "?"}'
}
res() { sed -n 's/^[0-9.]* *final result: *\([^ ]*\).*/\1/p' "$work/$1"; }
pct() { awk -v a="${1:-0}" -v b="${2:-0}" 'BEGIN {if (b > 0) printf "%.1f", 100 * a / b; else printf "?"}'; }
# check NAME REF: exit 0 and the reference's parameters, bitwise (a
# mismatch is noted in $work/bad: the bench's exit status)
check() {
  local r; r=$(res "$1")
  if [ "$(cat "$work/$1.rc")" = 0 ] && [ -n "$r" ] && [ "$r" = "$2" ]; then echo "bitwise --reference: yes"
  else echo "bitwise --reference: NO (exit $(cat "$work/$1.rc"), result '${r:-none}')"; touch "$work/bad"; fi
}
# events NAME: what the coordinator decided (decision, outcome,
# repartition, swap, shrink events), one line each
events() {
  python3 - "$work/$1.events" <<'PY'
import json, sys
try:
    lines = open(sys.argv[1]).read().splitlines()
except OSError:
    lines = []
for l in lines:
    try:
        e = json.loads(l)
    except ValueError:
        continue
    if e.get("event") in ("decision", "outcome", "repartition", "swap", "shrink", "switch-cost"):
        s = e.get("seconds")
        print("      %s at step %s, replica %s: %s%s%s" % (e["event"], e.get("step"), e.get("replica"), e.get("kind", ""),
              " (%s)" % e["reason"] if e.get("reason") else "", " [%.3g s]" % s if isinstance(s, (int, float)) else ""))
PY
}

# the reference: one process, the same arithmetic (no sleeping needed)
"$TRAINER" --reference ${TARGS/--mb-ms $MBMS/--mb-ms 0} > "$work/ref" 2>&1
"$TRAINER" --reference ${TARGS/--mb-ms $MBMS/--mb-ms 0} --move-layers > "$work/ref-move" 2>&1
ref=$(sed -n 's/^final result: \([^ ]*\).*/\1/p' "$work/ref")
refm=$(sed -n 's/^final result: \([^ ]*\).*/\1/p' "$work/ref-move")
[ -n "$ref" ] && [ -n "$refm" ] || { echo "$me: the reference run failed: $(tail -n 3 "$work/ref" "$work/ref-move")" >&2; exit 1; }

n0=$(live "$NN") || { echo "$me: fewer than $NN nodes" >&2; exit 1; }
ns=$(live $((NN + K))) || ns=""
echo "$me: $R replicas x $K stages (one rank per node), $M microbatches x $N steps, $((L + 2)) units, ${MBMS} ms of simulated compute per microbatch and stage${LOCKSTEP:+, --lockstep}; resihp-run's default silence and hang bounds"
echo "  throughput: steps/s over steps $ONSET..$((N - 1)) (the onset to the last), timed by replica 0's step lines"
echo "  settings: --microbatches $M --mb-ms $MBMS --layers $L --steps $N; slowdown: throttle -f F -p 4 (SIGSTOP/SIGCONT duty cycle, 4 ms period)${RT:+ at real-time priority ($RT)}"
echo "  the load of this machine at the start: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores)"

# A: failure-free, interleaved
echo
echo "A. failure-free, without and with layer-keyed groups (--move-layers); goal: they cost <= 2 %"
ffs="" ffms=""
for ((i = 1; i <= REPEAT; i++)); do
  run "ff-$i" 1 "$n0" --spares 0
  run "ffm-$i" 1 "$n0" --spares 0 -- --move-layers
  a=$(rate "ff-$i") b=$(rate "ffm-$i")
  ffs="$ffs $a" ffms="$ffms $b"
  printf '  run %d: without %s steps/s (%s), with %s steps/s (%s)\n' "$i" "${a:-?}" "$(check "ff-$i" "$ref")" "${b:-?}" "$(check "ffm-$i" "$refm")"
done
ff=$(echo "$ffs" | awk '{s = 0; for (i = 1; i <= NF; i++) s += $i; if (NF) printf "%.3f", s / NF}')
ffm=$(echo "$ffms" | awk '{s = 0; for (i = 1; i <= NF; i++) s += $i; if (NF) printf "%.3f", s / NF}')
cost=$(awk -v a="$ff" -v b="$ffm" 'BEGIN {if (a > 0) printf "%.1f", 100 * (a - b) / a}')
printf '  mean: without %s steps/s, with %s steps/s: the layer-keyed groups cost %s %% (goal <= 2 %%: %s)\n' \
  "${ff:-?}" "${ffm:-?}" "${cost:-?}" "$(awk -v c="${cost:-99}" 'BEGIN {print (c <= 2) ? "met" : "NOT met"}')"
# the noise every comparison below is subject to
echo "$ffs $ffms" | awk '{lo = hi = $1; for (i = 2; i <= NF; i++) {if ($i < lo) lo = $i; if ($i > hi) hi = $i}
  if (NF > 1) printf "  run-to-run spread of these %d failure-free runs (the noise of every comparison here): %.3f..%.3f steps/s, %.1f %% of the lowest\n", NF, lo, hi, 100 * (hi - lo) / lo}'

if [ "$ONLY" = "" ] || [ "$ONLY" = B ]; then
  echo
  echo "B. stage 1 of replica 1 slowed xF from outside (SIGSTOP/SIGCONT duty cycle on that one process) from step $ONSET"
  echo "  ideal = failure-free (A, without) x (R*K - 1 + 1/F)/(R*K); goal: chosen >= 90 % of ideal and >= the best single policy - 5 %"
  echo "  policies: absorb = no --move-layers, --spares 0, --swap-cost never; swap = no --move-layers, --spares 1, --swap-cost 0 (a swap always pays);"
  echo "            repart = --move-layers, --spares 0, --swap-cost never; chosen = --move-layers, --spares 1, the default swap cost (the planner decides)"
  if [ -z "$ns" ]; then
    echo "  skipped: no spare replica's $K nodes in the allocation"
  else
    for f in $FACTORS; do
      run "absorb-$f" "$f" "$n0" --spares 0 --swap-cost never
      run "swap-$f" "$f" "$ns" --spares 1 --swap-cost 0
      run "repart-$f" "$f" "$n0" --spares 0 --swap-cost never -- --move-layers
      run "chosen-$f" "$f" "$ns" --spares 1 -- --move-layers
      ideal=$(awk -v a="$ff" -v f="$f" -v n="$NN" 'BEGIN {printf "%.3f", a * (n - 1 + 1 / f) / n}')
      echo "  x$f: ideal $ideal steps/s; the victim's microbatches took x$(slowed "absorb-$f") those of replica 0's stage 1 after the onset (absorb run)"
      best=0 bestp="" ch=0
      for p in absorb swap repart chosen; do
        r=$(rate "$p-$f")
        case $p in absorb|swap) rf=$ref ;; *) rf=$refm ;; esac
        printf '    %-7s %7s steps/s = %5s %% of ideal  %s\n' "$p" "${r:-?}" "$(pct "$r" "$ideal")" "$(check "$p-$f" "$rf")"
        events "$p-$f"
        if [ "$p" = chosen ]; then ch=${r:-0}
        elif awk -v a="${r:-0}" -v b="$best" 'BEGIN {exit !(a > b)}'; then best=${r:-0} bestp=$p; fi
      done
      awk -v c="$ch" -v i="$ideal" -v b="$best" -v bp="$bestp" 'BEGIN {
        printf "    chosen: %.1f %% of ideal (goal >= 90 %%: %s); best single policy %s, chosen %+.1f %% of it (goal >= -5 %%: %s)\n",
          100 * c / i, (c >= 0.9 * i) ? "met" : "NOT met", bp, 100 * (c - b) / b, (c >= 0.95 * b) ? "met" : "NOT met"}'
    done
  fi
fi

if [ "$ONLY" = "" ] || [ "$ONLY" = C ]; then
  echo
  echo "C. the node of replica 1's stage 1 killed from outside at step $ONSET, no spare: drop the replica vs regroup (shrink in place)"
  echo "  goal: regroup keeps >= (R - 1/K)/R = $(awk -v r="$R" -v k="$K" 'BEGIN {printf "%.1f", 100 * (r - 1 / k) / r}') % of failure-free (drop: (R-1)/R = $(awk -v r="$R" 'BEGIN {printf "%.1f", 100 * (r - 1) / r}') %)"
  if [ -z "$KILLCMD" ]; then
    echo "  skipped: no --kill-node-cmd"
  else
    [ "$VERDICT" = bench ] && echo "  the killed node is set DOWN in Slurm (scontrol) once resihp-run waits for Slurm's verdict, as SlurmdTimeout would later"
    for p in drop regroup; do
      nodes=$(live "$NN") || { echo "  $p: skipped: fewer than $NN live nodes left"; continue; }
      node=$(victim_node "$nodes")
      if [ $p = drop ]; then run "$p" kill "$nodes" --spares 0; rf=$ref
      else run "$p" kill "$nodes" --spares 0 -- --move-layers; rf=$refm; fi
      # Slurm's verdict, if it has not come (drop: nobody waited for it)
      scontrol update nodename="$node" state=down reason=resihp-bench-regroup 2>/dev/null
      # never used again: the killed node, and the other nodes of its
      # replica's first step, which Slurm holds for that step as long as
      # the step is not known to have ended on the dead node (seen here:
      # minutes after the node was DOWN)
      dead="$dead$(echo "$nodes" | cut -d, -f$((K + 1))-$((2 * K)) | tr , ' ') "
      r=$(rate "$p")
      printf '    %-7s %7s steps/s after the loss = %5s %% of failure-free  %s\n' "$p" "${r:-?}" "$(pct "$r" "$ff")" "$(check "$p" "$rf")"
      t_kill=$(awk '/killing node/ {print $1; exit}' "$work/$p.bench" 2>/dev/null)
      t_down=$(awk '/set DOWN/ {print $1; exit}' "$work/$p.bench" 2>/dev/null)
      { grep -hE "resihp-run: (replica [0-9]*: )?no healthy spare|caught up at step" "$work/$p" | head -n 5
        [ -n "$t_down" ] && echo "$t_down the node set DOWN by the bench"; } | sort -n |
        awk -v t0="${t_kill:-0}" '{t = $1; $1 = ""; printf "      +%.2f s:%s\n", t - t0, $0}'
      events "$p"
      if [ $p = regroup ]; then
        c=$(sed -n 's/^[0-9.]* \[replica 1 stage 0\] caught up at step \([0-9]*\).*/\1/p' "$work/$p" | tail -n 1)
        if [ -n "$c" ] && [ "$c" -lt $((N - 10)) ]; then
          rs=$(rate "$p" "$c") rff=$(rate "ff-1" "$c")
          printf '    regroup from its catch-up (step %s) to the end: %s steps/s = %s %% of failure-free over the same steps (%s)\n' \
            "$c" "${rs:-?}" "$(pct "$rs" "$rff")" "$rff"
          awk -v a="${rs:-0}" -v b="${rff:-0}" -v r="$R" -v k="$K" 'BEGIN {g = (r - 1 / k) / r;
            printf "    goal >= %.1f %%: %s after the catch-up\n", 100 * g, (b > 0 && a >= g * b) ? "met" : "NOT met"}'
        fi
        awk -v a="${r:-0}" -v b="${ff:-0}" -v r="$R" -v k="$K" 'BEGIN {g = (r - 1 / k) / r;
          printf "    goal >= %.1f %%: %s over the steps from the loss (the wait for the verdict and the catch-up included)\n", 100 * g, (b > 0 && a >= g * b) ? "met" : "NOT met"}'
      fi
    done
  fi
fi
echo
[ -f "$work/bad" ] && exit 1
echo "every run ended with --reference's parameters, bitwise (per stage: $ref; per unit with --move-layers)"
