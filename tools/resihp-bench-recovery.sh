#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp-bench-recovery.sh: what step-level recovery buys, measured.
#
# Rank failures, inside an allocation (sbatch/salloc --no-kill): runs the
# example trainer three ways and prints one table:
#   1. resihp-run, no failure                      (the reference)
#   2. resihp-run with F rank kills                 (in-step recovery, spares)
#   3. checkpoint-restart: one plain srun step of R tasks, a checkpoint every
#      K steps, and after each failure the whole step is started again from
#      the last checkpoint (same F kills at the same steps).
# Failures are spread evenly (step i*N/(F+1)); they hit replicas 0,1,0,1...
# Both sides see the failure at once (socket errors; srun --kill-on-bad-exit
# ends the baseline's step), so the baseline is not charged Slurm's
# node-failure detection nor any queueing: it is a lower bound of what
# checkpoint-restart costs.
#
# Node failures (--kill-node-cmd, run OUTSIDE any allocation: it submits its
# own jobs): a whole node killed from outside at the same steps, so that
# Slurm itself must notice it (SlurmdTimeout). Four jobs:
#   a. resihp-run, no failure, and b. with F node kills (salloc --no-kill,
#      R replicas + S spares; --inject kill-node, the kill run by
#      --kill-node-cmd);
#   c. checkpoint-restart as sites run it, no failure, and d. with F node
#      kills: `sbatch --requeue` of a script whose one srun step of R tasks
#      checkpoints to disk every K steps and resumes from the last
#      checkpoint; the bench kills the node of its last task when the job
#      reaches each failure step; Slurm declares the node DOWN, ends the
#      job and requeues it (or, when the step ends first, the script
#      requeues the job itself, as sites' scripts do), and the requeued job
#      (SLURM_RESTART_COUNT) restarts on nodes Slurm holds up.
# It prints each end-to-end time (submission to end), the time each lost
# per failure (against its own failure-free run), the ratio, and the
# in-allocation table above (run first, inside an salloc) as a second
# line. The killed nodes are revived (--revive-node-cmd) after each job.
# All runs must end with bitwise identical parameters.
#
# usage: resihp-bench-recovery.sh [--replicas R] [--spares S] [--steps N]
#          [--failures F] [--checkpoint-every K] [--microbatches M]
#          [--mb-ms MS] [--bindir DIR] [--trainer PATH]
#          [--kill-node-cmd CMD --revive-node-cmd CMD [--no-in-allocation]]
# CMD: a command line with %n for the node's name (the lab's:
# "lab-cluster.sh killnode %n", "lab-cluster.sh startnode %n").
set -u
R=2 S=2 N=60 F=3 K=20 M=12 MBMS=5
BINDIR=$(cd "$(dirname "$0")" && pwd)
TRAINER="" KILL_CMD="" REVIVE_CMD="" IN_ALLOC=1
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) R=$2; shift ;;
    --spares) S=$2; shift ;;
    --steps) N=$2; shift ;;
    --failures) F=$2; shift ;;
    --checkpoint-every) K=$2; shift ;;
    --microbatches) M=$2; shift ;;
    --mb-ms) MBMS=$2; shift ;;
    --kill-node-cmd) KILL_CMD=$2; shift ;;
    --revive-node-cmd) REVIVE_CMD=$2; shift ;;
    --no-in-allocation) IN_ALLOC=0 ;;
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
# ---- node failures: resihp-run against sbatch --requeue ------------------
now() { echo "$EPOCHREALTIME"; }
elapsed() { echo "$2 - $1" | bc; }
res() { awk '/final result:/ {print $3}' "$1"; }
# on NODE CMD: run CMD (a command line with %n) for NODE
on() { local c=${2//%n/$1}; bash -c "$c" > /dev/null 2>&1; }
# every node back and idle (the killed ones revived), or 1 after 120 s
all_idle() {
  local n i
  for n in $(awk '{print $1}' "$work/killed" 2>/dev/null | sort -u); do on "$n" "$REVIVE_CMD"; done
  : > "$work/killed"
  for ((i = 0; i < 1200; i++)); do
    [ "$(sinfo -h -N -t idle -o '%N' | sort -u | wc -l)" -ge "$NN" ] && return 0
    sleep 0.1
  done
  echo "resihp-bench-recovery: the cluster's nodes are not all idle again: $(sinfo -h -N -o '%N %T' | paste -sd' ')" >&2
  return 1
}
job_state() { scontrol show job "$1" -o 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# wait_job ID: until the job has ended for good (a requeued job goes back
# to PENDING and runs again); prints its last state; 600 s at most
wait_job() {
  local i st=""
  for ((i = 0; i < 6000; i++)); do
    st=$(job_state "$1")
    case $st in COMPLETED|FAILED|CANCELLED|TIMEOUT|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|"") echo "${st:-GONE}"; return 0 ;; esac
    sleep 0.1
  done
  scancel "$1" 2>/dev/null
  echo "TIMEOUT(bench)"
}
# cr_job NAME [KILL-STEPS...]: checkpoint-restart as sites run it; kills the
# node of the last task when the job reaches each step; end-to-end time in
# $work/NAME.time, per kill "step node killed-at down-at" in $work/NAME.kills
cr_job() {
  local name=$1 id t0 t1 s node last st i; shift
  local ck=$work/$name.ckpt; mkdir -p "$ck"
  : > "$work/$name.kills"
  t0=$(now)
  id=$(sbatch --parsable --requeue --open-mode=append -N "$R" -J resihp-bench-cr \
    -o "$work/$name.out" "$work/cr.sbatch" "$ck") || { echo "resihp-bench-recovery: sbatch failed" >&2; return 1; }
  for s in "$@"; do
    # the step is reached (rank 0 prints every step): kill the node of the
    # last task, from outside, on the job's current nodes; then time
    # Slurm's verdict on it
    for ((i = 0; i < 30000; i++)); do grep -q "^step $s loss" "$work/$name.out" 2>/dev/null && break; sleep 0.01; done
    node=$(scontrol show hostnames "$(scontrol show job "$id" -o | grep -o ' NodeList=[^ ]*' | cut -d= -f2)" | tail -n 1)
    [ -n "$node" ] || { echo "resihp-bench-recovery: job $id has no nodes at step $s" >&2; break; }
    last=$(now)
    "$work/kill.sh" "$node"
    for ((i = 0; i < 6000; i++)); do
      case $(sinfo -h -n "$node" -o '%t') in down*|fail*|drain*) break ;; esac
      sleep 0.1
    done
    echo "$s $node $last $(now)" >> "$work/$name.kills"
  done
  st=$(wait_job "$id")
  t1=$(now)
  elapsed "$t0" "$t1" > "$work/$name.time"
  echo "$st" > "$work/$name.state"
  all_idle
}
# rr_job NAME [INJECT]: resihp-run on R replicas + S spares
rr_job() {
  local name=$1 t0 t1; shift
  t0=$(now)
  salloc -Q --no-kill -N "$NN" "$RUN" --replicas "$R" --spares "$S" \
    --kill-node-cmd "$work/kill.sh %n" ${1:+--inject "$1"} -- "$TRAINER" $TARGS > "$work/$name" 2>&1
  echo $? > "$work/$name.rc"
  t1=$(now)
  elapsed "$t0" "$t1" > "$work/$name.time"
  all_idle
}
node_failures() {
  NN=$((R + S))
  work=$(mktemp -d "${TMPDIR:-/tmp}/resihp-bench.XXXXXX") || return 1
  chmod 755 "$work"
  trap 'rm -rf "$work"' EXIT
  TARGS="--steps $N --microbatches $M --mb-ms $MBMS --print-every 0 --quiet"
  local steps=() inject="" i s to
  for ((i = 1; i <= F; i++)); do
    s=$((i * N / (F + 1))); steps+=("$s")
    inject+="${inject:+,}kill-node:$(((i - 1) % R))@$s"
  done
  to=$(scontrol show config | awk '$1 == "SlurmdTimeout" {print $3}')
  [ "$S" -ge "$F" ] || echo "resihp-bench-recovery: $F node failures with $S spares: resihp-run goes on without the last $((F - S)) replica(s)" >&2
  # the kill, logged (node, time), then KILL_CMD for the node
  export KILL_CMD
  printf '%s\n' '#!/bin/bash' \
    "echo \"\$1 \$EPOCHREALTIME\" >> '$work/killed'" \
    'c=${KILL_CMD//%n/$1}' \
    'exec bash -c "$c" > /dev/null 2>&1' > "$work/kill.sh"
  chmod 755 "$work/kill.sh"
  head -c 32 /dev/urandom > "$work/secret"; chmod 600 "$work/secret"
  # the job script: resumes from the last checkpoint in $1, whichever
  # attempt it is (SLURM_RESTART_COUNT after a requeue). Slurm requeues it
  # when it declares a node of the job down; if its step ends first (the
  # survivors' all-reduce fails), the script requeues itself, as sites'
  # scripts do, rather than end the job unfinished
  printf '%s\n' '#!/bin/bash' \
    "export RESIHP_ATTEMPT=\${SLURM_RESTART_COUNT:-0} RESIHP_SECRET_FILE='$work/secret'" \
    'echo "attempt $RESIHP_ATTEMPT started $EPOCHREALTIME on $SLURM_JOB_NODELIST"' \
    "srun --kill-on-bad-exit=1 --input=none -N $R -n $R '$TRAINER' --steps $N --microbatches $M --mb-ms $MBMS --print-every 1 --checkpoint \"\$1\" --checkpoint-every $K" \
    'rc=$?' \
    'if [ $rc != 0 ] && [ ! -e "$1/done" ]; then' \
    '  echo "attempt $RESIHP_ATTEMPT: srun ended with status $rc: requeueing the job at $EPOCHREALTIME"' \
    '  scontrol requeue "$SLURM_JOB_ID"; sleep 600' \
    'fi' \
    'exit $rc' \
    > "$work/cr.sbatch"
  chmod 755 "$work/cr.sbatch"
  : > "$work/killed"
  all_idle || return 1
  if [ "$IN_ALLOC" = 1 ]; then
    salloc -Q --no-kill -N "$NN" "$0" --replicas "$R" --spares "$S" --steps "$N" --failures "$F" \
      --checkpoint-every "$K" --microbatches "$M" --mb-ms "$MBMS" --bindir "$BINDIR" --trainer "$TRAINER" \
      > "$work/inalloc" 2>&1
    all_idle || return 1
  fi
  rr_job rr.ref
  rr_job rr.ft "$inject"
  cr_job cr.ref
  cr_job cr.ft "${steps[@]}"

  local w_rr0 w_rr w_cr0 w_cr cr0 cr1 r0 ok=0
  w_rr0=$(cat "$work/rr.ref.time") w_rr=$(cat "$work/rr.ft.time")
  w_cr0=$(cat "$work/cr.ref.time") w_cr=$(cat "$work/cr.ft.time")
  cr0=$(grep -o 'final checksum [0-9a-f]*' "$work/cr.ref.out" | awk '{print $3}' | tail -n 1)
  cr1=$(grep -o 'final checksum [0-9a-f]*' "$work/cr.ft.out" | awk '{print $3}' | tail -n 1)
  echo "resihp-bench-recovery: $R replicas x $M microbatches x $N steps (${MBMS} ms per microbatch), $S spare(s), $F whole-node kill(s) from outside at steps ${steps[*]}; SlurmdTimeout=${to:-?} s; checkpoint every $K steps"
  printf '  %-58s %8.2f s  checksum %s\n' "resihp-run, no failure" "$w_rr0" "$(res "$work/rr.ref")"
  printf '  %-58s %8.2f s  checksum %s  lost per failure %.2f s\n' "resihp-run, $F node failure(s)" "$w_rr" "$(res "$work/rr.ft")" "$(echo "($w_rr - $w_rr0) / $F" | bc -l)"
  printf '  %-58s %8.2f s  checksum %s\n' "checkpoint-restart (sbatch --requeue), no failure" "$w_cr0" "${cr0:-none}"
  printf '  %-58s %8.2f s  checksum %s  lost per failure %.2f s\n' "checkpoint-restart (sbatch --requeue), $F node failure(s)" "$w_cr" "${cr1:-none}" "$(echo "($w_cr - $w_cr0) / $F" | bc -l)"
  grep -E "failure [0-9]+:" "$work/rr.ft" | sed 's/^ */  resihp-run: /'
  local k=0 st nd tk td a q
  while read -r st nd tk td; do
    k=$((k + 1))
    # the attempt that started after this kill
    a=$(awk -v t="$tk" '/^attempt [0-9]+ started/ && $4 + 0 > t + 0 {print $4; exit}' "$work/cr.ft.out")
    # requeued by Slurm (it ended the job for the node's failure while the
    # step still waited for the node) or by the script (its step ended
    # first)
    q=$(awk -v t="$tk" '/requeueing the job at/ && $NF + 0 > t + 0 {print $NF; exit}' "$work/cr.ft.out")
    if [ "$(grep -c 'DUE TO NODE FAILURE' "$work/cr.ft.out")" -ge "$k" ]; then
      q="Slurm ended the job for the node's failure and requeued it"
    elif [ -n "$q" ]; then
      q=$(printf 'the job script saw its step fail after %.1f s and requeued the job' "$(echo "$q - $tk" | bc -l)")
    else
      q="requeued"
    fi
    printf '  checkpoint-restart: failure %d: node %s killed at step %s; Slurm declared it down after %.1f s; %s; the requeued job ran again after %s s, from the checkpoint of step %d\n' \
      "$k" "$nd" "$st" "$(echo "$td - $tk" | bc -l)" "$q" \
      "$([ -n "$a" ] && printf '%.1f' "$(echo "$a - $tk" | bc -l)" || echo '?')" "$((st / K * K))"
  done < "$work/cr.ft.kills"
  printf '  end to end, resihp-run vs checkpoint-restart with %d node failure(s): %.2fx (measured here)\n' "$F" "$(echo "$w_cr / $w_rr" | bc -l)"
  grep -o 'effective throughput, resihp-run vs checkpoint-restart in the same allocation.*' "$work/inalloc" 2>/dev/null | sed 's/^/  /'
  [ "$(cat "$work/rr.ref.rc")" = 0 ] && [ "$(cat "$work/rr.ft.rc")" = 0 ] &&
    [ "$(cat "$work/cr.ref.state")" = COMPLETED ] && [ "$(cat "$work/cr.ft.state")" = COMPLETED ] ||
    { echo "  a run failed (resihp-run $(cat "$work/rr.ref.rc")/$(cat "$work/rr.ft.rc"), checkpoint-restart $(cat "$work/cr.ref.state")/$(cat "$work/cr.ft.state"))"; ok=1; }
  r0=$(res "$work/rr.ref")
  if [ -z "$r0" ] || [ "$r0" != "$(res "$work/rr.ft")" ] || [ "$r0" != "$cr0" ] || [ "$r0" != "$cr1" ]; then
    echo "  checksums differ"; ok=1
  else
    echo "  all four runs end with bitwise identical parameters"
  fi
  return $ok
}

if [ -n "$KILL_CMD" ]; then
  [ -n "$REVIVE_CMD" ] || { echo "resihp-bench-recovery: --kill-node-cmd needs --revive-node-cmd (the killed nodes must come back for the next job)" >&2; exit 1; }
  [ -z "${SLURM_JOB_ID:-}" ] || { echo "resihp-bench-recovery: with --kill-node-cmd, run it outside any allocation: it submits its own jobs (salloc, sbatch --requeue)" >&2; exit 1; }
  node_failures
  exit $?
fi
[ -n "${SLURM_JOB_ID:-}" ] || { echo "resihp-bench-recovery: run it inside an allocation: salloc --no-kill -N$((R + S)) $0 (or with --kill-node-cmd, outside one)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/resihp-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
TARGS="--steps $N --microbatches $M --mb-ms $MBMS --print-every 0 --quiet"
steps=(); inject=""
for ((i = 1; i <= F; i++)); do
  s=$((i * N / (F + 1))); steps+=("$s")
  inject+="${inject:+,}kill-rank:$(((i - 1) % R))@$s"
done

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

echo "resihp-bench-recovery: $R replicas x $M microbatches x $N steps (${MBMS} ms per microbatch), $S spare(s), $F rank kill(s) at steps ${steps[*]}, checkpoint every $K steps"
printf '  %-44s %8.2f s  %7.2f steps/s  checksum %s\n' "resihp-run, no failure" "$w_ref" "$(echo "$N / $w_ref" | bc -l)" "$(res "$work/ref")"
printf '  %-44s %8.2f s  %7.2f steps/s  checksum %s\n' "resihp-run, $F failure(s)" "$w_ft" "$(echo "$N / $w_ft" | bc -l)" "$(res "$work/ft")"
printf '  %-44s %8.2f s  %7.2f steps/s  checksum %s (%d attempts)\n' "checkpoint-restart, $F failure(s)" "$w_cr" "$(echo "$N / $w_cr" | bc -l)" "${cr_sum:-none}" "$attempts"
grep -E "failure [0-9]+:|worst" "$work/ft" | sed 's/^ */  resihp-run: /'
printf '  effective throughput, resihp-run vs checkpoint-restart in the same allocation (rank kills): %.2fx (measured here)\n' "$(echo "$w_cr / $w_ft" | bc -l)"
# Slurm's own detection of a dead node and a requeue are not in this
# figure: --kill-node-cmd measures them (no model).
ok=0
[ "$rc_ref" = 0 ] && [ "$rc_ft" = 0 ] && [ -e "$ck/done" ] || { echo "  a run failed (resihp-run $rc_ref/$rc_ft, checkpoint-restart done: $([ -e "$ck/done" ] && echo yes || echo no))"; ok=1; }
if [ "$(res "$work/ref")" != "$(res "$work/ft")" ] || [ "$(res "$work/ref")" != "$cr_sum" ]; then
  echo "  checksums differ"; ok=1
else
  echo "  all three runs end with bitwise identical parameters"
fi
exit $ok
