#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp training demo: builds resihp, starts a real 6-node Slurm cluster on
# this machine, and trains the example model (contrib/trainer) as 3
# data-parallel replicas + 2 spare nodes under resihp-run while a rank is
# killed, a whole node is killed (slurmd and all) and a rank hangs. The
# survivors keep training; the failed replica's step is relaunched on a
# spare while one is left (the third failure finds none: the job goes on
# with 2 replicas and the same microbatches per step); the final parameters are compared bit for bit with a failure-free
# run of the same job. Then the same with sharded replicas (2 pipeline
# stages per replica, contrib/pipeline-trainer) against one process
# training both stages; then a replica that turns slow (fail-slow: its
# microbatches move to the others, then it is swapped for a spare); and
# a small GPT in PyTorch (contrib/torch-gpt) on resihp.torch's Trainer
# through a rank kill and a hang, against one process, then the same GPT
# in 2 pipeline stages per replica through a kill; and
# resihp-bench-recovery.sh compares with checkpoint-restart as sites run it
# (sbatch --requeue, Slurm noticing a killed node itself). Always stops the
# cluster on exit. Run as root.
# Env: KEEP_LAB=1 keeps the cluster's files; STEPS (60), MB_MS (5),
# NO_BENCH=1 skips the comparison, BENCH_STEPS (600) its job's length,
# BENCH_SLURMD_TIMEOUT (10) the SlurmdTimeout it runs under.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
demo=run-training-demo
. "$src/contrib/dev/demo-lab.sh"
B=$src/build
STEPS=${STEPS:-60} MB_MS=${MB_MS:-5}
BENCH_STEPS=${BENCH_STEPS:-600} BENCH_SLURMD_TIMEOUT=${BENCH_SLURMD_TIMEOUT:-10}
# Slurm must not notice the killed node and end the job: resihp does it.
# 3 replicas + 2 spares, and a sixth node for the benchmark, which replaces
# all three of its failures.
export NNODES=6
SLURMD_TIMEOUT=300 PLUGSTACK_LINE="required $B/spank/.libs/resihp.so" cluster start || exit 1
eval "$(cluster env)"
sinfo -N -o '  %N %T %c CPUs'
TARGS="--steps $STEPS --microbatches 12 --mb-ms $MB_MS --print-every 10"
cd "$LAB" || exit 1
# wait_idle N: until N nodes are idle again after the last job (at most 10 s)
wait_idle() {
  local i
  for i in $(seq 50); do [ "$(sinfo -h -N -t idle -o '%N' | sort -u | wc -l)" -ge "$1" ] && break; sleep 0.2; done
}
# verdict WHAT GOT WANT WANT-SAID: GOT is bitwise WANT, or a MISMATCH line
verdict() {
  if [ -n "$3" ] && [ "$2" = "$3" ]; then echo "$1: $2 = $4 (bitwise identical)"
  else echo "MISMATCH: $1: '$2', $4 '$3'"; fi
}

step "failure-free reference: 3 replicas, 12 microbatches per step, $STEPS steps"
salloc -Q --no-kill -N5 "$B/tools/resihp-run" --quiet --replicas 3 --spares 2 -- \
  "$B/contrib/trainer/resihp-trainer" $TARGS --quiet > "$LAB/ref.out" 2>&1
ref=$(awk '/final result:/ {print $3}' "$LAB/ref.out")
grep -E "training time|final result" "$LAB/ref.out"

k1=$((STEPS / 5)) k2=$((STEPS * 2 / 5)) k3=$((STEPS * 3 / 5))
inject="kill-rank:1@$k1,kill-node:2@$k2,hang-rank:0@$k3"
step "the same job with faults: --inject $inject"
echo "   (kill-node runs: lab-cluster.sh killnode NODE - slurmd, slurmstepd and tasks, SIGKILL)"
salloc -Q --no-kill -N5 "$B/tools/resihp-run" --replicas 3 --spares 2 \
  --kill-node-cmd "env LAB=$LAB $src/tests/harness/lab-cluster.sh killnode %n" \
  --inject "$inject" -- "$B/contrib/trainer/resihp-trainer" $TARGS 2>&1 |
  grep -v -e '^resihp\[.*warn allreduce' -e '^srun: ' | tee "$LAB/ft.out"
got=$(awk '/final result:/ {print $3}' "$LAB/ft.out")
step "verdict"
verdict "final parameters with 3 failures" "$got" "$ref" "failure-free $ref"
for n in $(sinfo -h -N -o '%N' | sort -u); do
  f=$LAB/run/slurmd-$n.pid
  if [ -f "$f" ] && kill -0 "$(cat "$f")" 2>/dev/null; then :; else
    echo "node $n is really dead (its slurmd is gone); restarting it for the benchmark"
    cluster startnode "$n"
  fi
done

# Sharded replicas: each replica is 2 ranks on 2 nodes, rank k a pipeline
# stage of contrib/pipeline-trainer; a stage-1 rank and then a stage-0
# rank die; the replica is replaced on the spare pair and each stage
# catches up its own shard. Reference: one process training both stages.
PARGS="--steps $STEPS --microbatches 12 --mb-ms $MB_MS --print-every 20"
P=$B/contrib/pipeline-trainer/resihp-pipeline-trainer
step "sharded replicas: 2 replicas x 2 pipeline stages (2 nodes each) + a spare pair"
pref=$("$P" --reference --stages 2 $PARGS --quiet | awk '/^final result:/ {print $3}')
echo "   one process training the 2 stages alone (--reference): $pref"
pinject="kill-rank:0.1@$k1,kill-rank:1.0@$k3"
echo "   --inject $pinject (stage 1 of replica 0, then stage 0 of replica 1)"
wait_idle 6
salloc -Q --no-kill -N6 "$B/tools/resihp-run" --mpi pmix --replicas 2 --nodes-per-replica 2 \
  --ranks-per-replica 2 --spares 1 --inject "$pinject" -- "$P" $PARGS 2>&1 |
  grep -v -e '^resihp\[.*warn allreduce' -e '^srun: ' | tee "$LAB/pipe.out"
pgot=$(awk '/final result:/ {print $3}' "$LAB/pipe.out")
verdict "every stage's parameters with 2 failures" "$pgot" "$pref" --reference

# Fail-slow: not a failure, a replica that turns slow. Variable-length
# data; the coordinator's detector sees replica 2 at 2.5x from its
# microbatch times, moves its microbatches to the others by predicted cost,
# and swaps it for a spare once that pays back (a swap said to cost 0.2 s,
# the lab's relaunch time). Reference: one process. Longer than the other
# runs: the detector learns each rank's own pace first (its warm-up), and a
# slowdown must last a second before it counts, so a 60-step run (3 s)
# ends before the swap.
FSTEPS=${FSTEPS:-300} fk=$((FSTEPS / 5))
FARGS="--steps $FSTEPS --microbatches 12 --mb-ms $MB_MS --data longtail --print-every 50"
step "fail-slow: 3 replicas on variable-length data, replica 2 made 2.5x slower at step $fk"
fref=$("$B/contrib/trainer/resihp-trainer" --reference $FARGS | awk '/final checksum/ {print $NF}')
echo "   one process over the same microbatches (--reference): $fref"
wait_idle 4
salloc -Q --no-kill -N4 "$B/tools/resihp-run" --replicas 3 --spares 1 --progress 2 --swap-cost 0.2 \
  --inject "slow-rank:2@${fk}x2.5" -- "$B/contrib/trainer/resihp-trainer" $FARGS 2>&1 |
  grep -v -e '^resihp\[.*warn allreduce' -e '^srun: ' -e '^\[replica' | tee "$LAB/slow.out"
fgot=$(awk '/final result:/ {print $3}' "$LAB/slow.out")
what="kept with fewer microbatches"
grep -q "swapped for a spare at step" "$LAB/slow.out" && what="swapped for a spare"
verdict "parameters with a slow replica ($what)" "$fgot" "$fref" --reference

# PyTorch: a small GPT (contrib/torch-gpt, byte-level, Debian's licence
# texts) on resihp.torch's Trainer, deterministic mode: a rank is killed and
# another hangs; the replacements catch up through load_state_dict (model,
# AdamW, cosine LR, RNG). Reference: one process computing every microbatch.
PY=/usr/bin/python3
GARGS="--layers 2 --d-model 64 --heads 4 --ctx 32 --batch 4 --microbatches 6 --steps 16 --threads 1 --cosine"
if "$PY" -c 'import torch' 2>/dev/null; then
  export PYTHONPATH=$src/python RESIHP_LIBRARY=$B/libresihp/.libs/libresihp.so
  step "PyTorch: GPT example, 3 replicas + 2 spares, --inject kill-rank:1@4,hang-rank:0@9"
  tref=$("$PY" "$src/contrib/torch-gpt/train_gpt.py" $GARGS --standalone | awk '/^digest/ {print $2}')
  echo "   one process over the same microbatches (--standalone): $tref"
  wait_idle 5
  salloc -Q --no-kill -N5 "$B/tools/resihp-run" --replicas 3 --spares 2 --wait-for-replacements \
    --inject kill-rank:1@4,hang-rank:0@9 -- "$PY" "$src/contrib/torch-gpt/train_gpt.py" $GARGS 2>&1 |
    grep -v -e '^resihp\[' -e '^srun: ' -e '^slurmstepd' | tee "$LAB/torch.out"
  tgot=$(awk '/final result:/ {print $3}' "$LAB/torch.out")
  verdict "GPT state (model + optimizer) with 2 failures" "$tgot" "$tref" --standalone
  # Pipelined replicas: the same GPT in 2 stages (embedding + first block,
  # last block + head), stage k on rank k of each replica, a stage-1 rank
  # killed; the replacement's ranks catch up their stages.
  step "PyTorch: GPT in 2 pipeline stages per replica, 3 replicas + 2 spares, --inject kill-rank:1@4"
  sref=$("$PY" "$src/contrib/torch-gpt/train_gpt.py" $GARGS --stages 2 --standalone | awk '/^digest/ {print $2}')
  echo "   one process running both stages (--standalone --stages 2): $sref"
  wait_idle 5
  salloc -Q --no-kill -N5 --ntasks-per-node=2 "$B/tools/resihp-run" --replicas 3 --spares 2 \
    --ranks-per-replica 2 --wait-for-replacements --inject kill-rank:1@4 -- \
    "$PY" "$src/contrib/torch-gpt/train_gpt.py" $GARGS --stages 2 2>&1 |
    grep -v -e '^resihp\[' -e '^srun: ' -e '^slurmstepd' | tee "$LAB/torch-stages.out"
  sgot=$(awk '/final result:/ {print $3}' "$LAB/torch-stages.out")
  verdict "GPT stages' state with a failure" "$sgot" "$sref" "--standalone --stages 2"
else
  tref=skipped tgot=skipped sref=skipped sgot=skipped
  echo "PyTorch section skipped: $PY cannot import torch (apt-get install python3-torch)"
fi

if [ -z "${NO_BENCH:-}" ]; then
  step "resihp-run vs checkpoint-restart, a whole node killed (tools/resihp-bench-recovery.sh)"
  # checkpoint-restart as sites run it (sbatch --requeue) needs Slurm to
  # notice the dead node: the cluster again, with the lab's SlurmdTimeout
  echo "   (the cluster restarted with SlurmdTimeout=$BENCH_SLURMD_TIMEOUT; a $BENCH_STEPS-step job, a node killed at its middle)"
  cluster stop >/dev/null 2>&1
  SLURMD_TIMEOUT=$BENCH_SLURMD_TIMEOUT PLUGSTACK_LINE="required $B/spank/.libs/resihp.so" cluster start >/dev/null 2>&1 || exit 1
  "$src/tools/resihp-bench-recovery.sh" --bindir "$B/tools" \
    --trainer "$B/contrib/trainer/resihp-trainer" --steps "$BENCH_STEPS" --mb-ms "$MB_MS" \
    --replicas 2 --spares 3 --failures 1 --checkpoint-every 100 \
    --kill-node-cmd "env LAB=$LAB $src/tests/harness/lab-cluster.sh killnode %n" \
    --revive-node-cmd "env LAB=$LAB $src/tests/harness/lab-cluster.sh startnode %n"
fi
[ -n "$ref" ] && [ "$got" = "$ref" ] && [ -n "$pref" ] && [ "$pgot" = "$pref" ] &&
  [ -n "$fref" ] && [ "$fgot" = "$fref" ] && [ -n "$tref" ] && [ "$tgot" = "$tref" ] &&
  [ -n "$sref" ] && [ "$sgot" = "$sref" ]
