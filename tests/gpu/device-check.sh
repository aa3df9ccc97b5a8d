#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# device-check.sh: every GPU path of resihp on a real device, in one run of
# a few minutes, with no Slurm (a machine lent with a GPU and no cluster):
#   probe     resihp-probe's NVML check against the GPU, and one threshold
#             that must fail (--expect-gpus one more than there are)
#   fixed     the deterministic-mode CUDA kernels bit for bit against the
#             CPU fixed point (tests/gpu/test_fixed_point_gpu), and their
#             GB/s beside a device memcpy (resihp-bench-gpu-fixed)
#   staged    device buffers staged through pinned host memory between
#             processes sharing the GPU, one SIGKILLed mid-call
#             (tests/gpu/test_allreduce_staged), and their bus bandwidth
#             for 2 and 4 processes (resihp-bench-device)
#   nccl      a one-rank NCCL communicator's life cycle (init, all-reduce,
#             revoke, abort, re-init: tests/gpu/test_nccl_lifecycle), with
#             the loaded NCCL's ncclCommRevoke/ncclCommShrink and again as
#             without them (the fallbacks);
#             two ranks need two GPUs (tests/gpu/test_allreduce_nccl skips
#             on one); the NCCL path's all-reduce beside torch.distributed's
#             NCCL all-reduce, one rank each (tests/gpu/torch_nccl_bench.py),
#             and whether NCCL takes two ranks on one GPU
#   torch     resihp.torch with the model on the GPU (tests/python/
#             torch_cuda.py); the GPT example (contrib/torch-gpt) as 2
#             replicas sharing the GPU under resihp-local-job, deterministic
#             mode, replica 1 SIGKILLed from outside mid-run and relaunched:
#             the final state bitwise the one of --standalone on the same
#             device; float32 mode's step time beside stock DDP (gloo, the
#             model on the GPU) and one process computing everything
# Each result is one line of $OUT/summary.txt (PASS, FAIL or SKIP, what,
# figures); the logs go to $OUT/logs.tar.gz. Exit status: 0 nothing
# failed, 1 something did, 77 no GPU here (at once).
#
# --cpu: the parts that need no GPU, here (tests/gpu/device-check-cpu.test):
# the probe against the fake NVML of the build, the local job with its
# kill and relaunch, the bitwise comparison and the benchmark's plumbing on
# the CPU, with a small model. The steps that need CUDA report SKIP.
#
# Binaries come from a build tree (--builddir, default the tree this
# script is in, ./build) or a bundle made here with --make-bundle DIR: the
# programs and the libraries they need that the device machine may lack
# (PMIx, hwloc, munge, libevent, libcudart), not NCCL (taken from the
# device machine's CUDA or PyTorch). With a bundle, libresihp is loaded
# from it (RESIHP_LIBRARY) and LD_LIBRARY_PATH points at it.
#
# usage: device-check.sh [--cpu] [--builddir DIR | --bundle DIR]
#        device-check.sh --make-bundle DIR [--builddir DIR]
# env: OUT (results; default a new temporary directory), PY (python3 with
# torch; default python3, /usr/bin/python3 with --cpu)
set -u
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
cpu=0 builddir=$src/build bundle= make_bundle=
while [ $# -gt 0 ]; do
  case $1 in
  --cpu) cpu=1 ;;
  --builddir) builddir=$2; shift ;;
  --bundle) bundle=$2; shift ;;
  --make-bundle) make_bundle=$2; shift ;;
  -h|--help) sed -n '3,47p' "$0"; exit 0 ;;
  *) echo "device-check.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

# The programs, by name, and where each lives in a build tree.
PROGS="tools/resihp-probe tools/resihp-bench-gpu-fixed tools/resihp-bench-device
tests/gpu/test_fixed_point_gpu tests/gpu/test_allreduce_staged
tests/gpu/test_nccl_lifecycle tests/gpu/test_allreduce_nccl
tests/gpu/resihp-local-job"

# real_binary PATH: the ELF behind a libtool wrapper script, or PATH.
real_binary() {
  local d b
  d=$(dirname "$1") b=$(basename "$1")
  if [ -f "$d/.libs/$b" ]; then echo "$d/.libs/$b"
  elif [ -f "$d/.libs/lt-$b" ]; then echo "$d/.libs/lt-$b"
  else echo "$1"; fi
}

if [ -n "$make_bundle" ]; then
  mkdir -p "$make_bundle/bin" "$make_bundle/lib" || exit 1
  for p in $PROGS; do
    [ -e "$builddir/$p" ] || { echo "device-check.sh: $builddir/$p is not built (make -C $builddir check TESTS=)" >&2; exit 1; }
    cp "$(real_binary "$builddir/$p")" "$make_bundle/bin/$(basename "$p")"
  done
  cp -L "$builddir/libresihp/.libs/libresihp.so.0" "$make_bundle/lib/"
  # what the programs need beyond the C library and the GPU stack the
  # device machine has (its driver, NCCL)
  for f in "$make_bundle"/bin/* "$make_bundle/lib/libresihp.so.0"; do
    ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
  done | sort -u | while read -r name path; do
    case $name in
    libc.so*|libm.so*|libpthread.so*|libdl.so*|librt.so*|libstdc++.so*|libgcc_s.so*|libnccl.so*|libresihp.so*) ;;
    *) cp -L "$path" "$make_bundle/lib/$name" ;;
    esac
  done
  du -sh "$make_bundle"
  exit 0
fi

# ---- is there a GPU? (at once, before anything is started) ---------------
if [ $cpu = 0 ]; then
  ls /dev/nvidia[0-9]* >/dev/null 2>&1 && command -v nvidia-smi >/dev/null &&
    nvidia-smi -L 2>/dev/null | grep -q '^GPU ' ||
    { echo "device-check.sh: no NVIDIA GPU here (skip; --cpu runs the parts that need none)"; exit 77; }
fi

OUT=${OUT:-$(mktemp -d /tmp/device-check.XXXXXX)}
mkdir -p "$OUT" || exit 1
logs=$(mktemp -d /tmp/device-check-logs.XXXXXX)
summary=$OUT/summary.txt
: > "$summary"
failed=0
T0=$(date +%s)
result() { # STATUS WHAT...: one line of the summary, echoed
  echo "$*" | tee -a "$summary"
  [ "$1" = FAIL ] && failed=1
  return 0
}
figure() { echo "  $*" | tee -a "$summary"; }

if [ -n "$bundle" ]; then
  bundle=$(cd "$bundle" && pwd)
  bin() { echo "$bundle/bin/$(basename "$1")"; }
  export RESIHP_LIBRARY=$bundle/lib/libresihp.so.0
  LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
else
  bin() { echo "$builddir/$1"; }
  export RESIHP_LIBRARY=$builddir/libresihp/.libs/libresihp.so
fi
if [ $cpu = 1 ]; then PY=${PY:-/usr/bin/python3}; else PY=${PY:-python3}; fi
# NCCL: the device machine's, from its CUDA or its PyTorch
if [ $cpu = 0 ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then
  nccl=$(ls /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2 \
    2>/dev/null | head -n 1)
  [ -n "$nccl" ] || nccl=$("$PY" -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null)
  [ -f "$nccl" ] && LD_LIBRARY_PATH=$(dirname "$nccl")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}
export PYTHONPATH=$src/python:$src/contrib/torch-gpt:$src/tests/python
export PYTHONUNBUFFERED=1

# run NAME TIMEOUT CMD...: CMD's output in $logs/NAME.log; its exit status.
# The whole run stays within BUDGET seconds (default 450: the device tool's
# call is 10 minutes): a step gets at most what is left (124 when cut).
BUDGET=${BUDGET:-450}
run() {
  local name=$1 t=$2 left; shift 2
  left=$((BUDGET - ($(date +%s) - T0)))
  [ "$left" -lt "$t" ] && t=$left
  [ "$t" -lt 5 ] && { echo "not run: the check's $BUDGET s are spent" > "$logs/$name.log"; return 124; }
  timeout -k 10 "$t" "$@" > "$logs/$name.log" 2>&1
}
# step NAME TIMEOUT CMD...: a test program: 0 PASS, 77 SKIP, else FAIL
step() {
  local name=$1 rc
  run "$@"; rc=$?
  case $rc in
  0) result PASS "$name" ;;
  77) result SKIP "$name: $(tail -n 1 "$logs/$name.log")" ;;
  124|137) result FAIL "$name: timed out or not run (out of time): $(tail -n 1 "$logs/$name.log")" ;;
  *) result FAIL "$name: exit $rc: $(tail -n 3 "$logs/$name.log" | tr '\n' ' ')" ;;
  esac
}

{
  echo "device-check on $(hostname) at $(date -u +%FT%TZ), $(uname -m), ${cpu/1/--cpu}"
  [ $cpu = 0 ] && nvidia-smi --query-gpu=name,driver_version,memory.total,temperature.gpu,clocks.sm,clocks.mem,ecc.mode.current --format=csv
  "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "devices", torch.cuda.device_count())' 2>&1
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "resihp's NCCL: $(ldd "$(bin tests/gpu/test_nccl_lifecycle)" 2>&1 | grep -m 1 nccl)"
} > "$logs/env.log" 2>&1
head -n 3 "$logs/env.log" | sed 's/^/# /' | tee -a "$summary"

# ---- probe ---------------------------------------------------------------
probe=$(bin tools/resihp-probe)
nvml=()
if [ $cpu = 1 ]; then nvml=(--nvml "$builddir/tests/fake/.libs/libfake-nvml.so")
elif ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1 '; then
  # the driver's library where the loader is not told of it
  f=$(ls /usr/local/nvidia/lib64/libnvidia-ml.so.1 /usr/local/nvidia/lib/libnvidia-ml.so.1 \
    /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 /usr/lib64/libnvidia-ml.so.1 2>/dev/null | head -n 1)
  [ -n "$f" ] && nvml=(--nvml "$f")
fi
run probe 60 "$probe" --checks gpu --json "${nvml[@]}"; rc=$?
detail=$(sed -n 's/.*"detail":"\([^"]*\)".*/\1/p' "$logs/probe.log")
ngpu=$(echo "$detail" | sed -n 's/^\([0-9][0-9]*\) GPUs\{0,1\} healthy.*/\1/p')
if [ $rc = 0 ] && [ -n "$ngpu" ]; then
  result PASS "probe: NVML gpu check healthy"
  figure "probe: $detail"
  # what the driver's own tool says beside it (temperature and memory are
  # not the probe's: a hot GPU shows as thermal throttling)
  [ $cpu = 0 ] && figure "nvidia-smi: $(nvidia-smi --query-gpu=temperature.gpu,memory.used,memory.total,clocks.sm,clocks.max.sm,clocks.mem,ecc.errors.uncorrected.volatile.total --format=csv | tr '\n' ';')"
else
  result FAIL "probe: NVML gpu check: exit $rc: $(tail -n 2 "$logs/probe.log" | tr '\n' ' ')"
  ngpu=1
fi
want=$((ngpu + 1))
run probe-threshold 60 "$probe" --checks gpu --expect-gpus $want "${nvml[@]}"; rc=$?
if [ $rc = 1 ] && grep -q "sees $ngpu GPUs*, step asked for $want" "$logs/probe-threshold.log"; then
  result PASS "probe: --expect-gpus $want fails (exit 1): $(grep -m 1 '^gpu ' "$logs/probe-threshold.log" | tr -s ' ')"
else
  result FAIL "probe: --expect-gpus $want should fail with exit 1 and say why, got $rc: $(tail -n 3 "$logs/probe-threshold.log" | tr '\n' ' ')"
fi

# ---- the CUDA fixed-point kernels ----------------------------------------
step fixed-point-gpu 180 "$(bin tests/gpu/test_fixed_point_gpu)"
if [ $cpu = 0 ]; then
  run bench-gpu-fixed 120 "$(bin tools/resihp-bench-gpu-fixed)" 11 $((1 << 30)) &&
    figure "$(grep -v '^$' "$logs/bench-gpu-fixed.log" | tail -n 8)"
fi

# ---- device buffers staged through pinned host memory --------------------
step allreduce-staged 180 "$(bin tests/gpu/test_allreduce_staged)"
if [ $cpu = 0 ]; then
  for n in 2 4; do
    run bench-device-$n 120 "$(bin tools/resihp-bench-device)" --ranks $n --reps 3 --max 256M &&
      figure "$(tail -n 4 "$logs/bench-device-$n.log")"
  done
fi

# ---- NCCL ----------------------------------------------------------------
step nccl-lifecycle 120 "$(bin tests/gpu/test_nccl_lifecycle)"
step allreduce-nccl-2gpus 120 "$(bin tests/gpu/test_allreduce_nccl)"
if [ $cpu = 0 ]; then
  run bench-nccl 120 "$(bin tools/resihp-bench-device)" --nccl --ranks 1 --reps 3 --max 256M &&
    figure "$(tail -n 4 "$logs/bench-nccl.log")"
  run torch-nccl 180 "$PY" "$here/torch_nccl_bench.py" --max 256M
  figure "$(tail -n 6 "$logs/torch-nccl.log")"
fi

# ---- resihp.torch on the device ------------------------------------------
if [ $cpu = 0 ]; then
  run torch-cuda 300 "$PY" "$src/tests/python/torch_cuda.py"; rc=$?
  nok=$(grep -c '^not ok' "$logs/torch-cuda.log"); okn=$(grep -c '^ok' "$logs/torch-cuda.log")
  if [ $rc = 0 ] && [ "$nok" = 0 ] && [ "$okn" -gt 0 ]; then
    result PASS "torch_cuda.py: $okn checks ok"
  else
    result FAIL "torch_cuda.py: exit $rc, $nok not ok: $(grep '^not ok' "$logs/torch-cuda.log" | head -n 3 | tr '\n' ' ')"
  fi
  dev=cuda GPT="--layers 2 --d-model 64 --heads 4 --ctx 32 --batch 4 --microbatches 6 --steps 12 --clip 0.5"
else
  dev=cpu GPT="--layers 1 --d-model 16 --heads 2 --ctx 8 --batch 2 --microbatches 4 --steps 6 --threads 1"
fi
EX=$src/contrib/torch-gpt
job=$(bin tests/gpu/resihp-local-job)
digest_of() { awk '/^digest / {print $2; exit}' "$1"; }

run gpt-reference 300 "$PY" "$EX/train_gpt.py" $GPT --device $dev --standalone
ref=$(digest_of "$logs/gpt-reference.log")
# 2 replicas; replica 1 holds at step 3 (writes its pid), is SIGKILLed from
# here, and is relaunched; its replacement catches up from replica 0
hold=$logs/hold.pid
run gpt-kill 600 "$job" --replicas 2 --replace -- "$PY" "$EX/train_gpt.py" $GPT \
  --device $dev --test-hold "3:1:$hold" &
jobpid=$!
for _ in $(seq 600); do [ -s "$hold" ] && break; kill -0 $jobpid 2>/dev/null || break; sleep 0.5; done
if [ -s "$hold" ]; then kill -9 "$(cat "$hold")"; killed=yes; else killed=no; fi
wait $jobpid; rc=$?
got=$(sed -n 's/.*final result: *\([^ ]*\) (\([0-9]*\) replicas agree).*/\1 \2/p' "$logs/gpt-kill.log")
if [ -z "$ref" ]; then
  result FAIL "gpt: the --standalone reference on $dev gave no digest: $(tail -n 2 "$logs/gpt-reference.log" | tr '\n' ' ')"
elif [ $rc = 0 ] && [ $killed = yes ] && [ "$got" = "$ref 2" ] &&
  grep -q 'replica 1 relaunched' "$logs/gpt-kill.log"; then
  result PASS "gpt on $dev: 2 replicas, replica 1 SIGKILLed at step 3 and relaunched, final state bitwise the standalone one ($ref)"
else
  result FAIL "gpt on $dev: exit $rc, killed $killed, final '$got', reference $ref: $(grep -v '^resihp\[' "$logs/gpt-kill.log" | tail -n 4 | tr '\n' ' ')"
fi

# float32 step time: one process computing everything, stock DDP (gloo),
# resihp (2 replicas): the means of steps 2.. of each
if [ $cpu = 0 ]; then
  PERF="--layers 4 --d-model 512 --heads 8 --ctx 256 --batch 16 --microbatches 8 --steps 30 --device cuda"
else
  PERF="$GPT --device cpu"
fi
mean_of() { sed -n 's/^mean step time \([0-9.]*\) s.*/\1/p' "$1" | head -n 1; }
run perf-reference 300 "$PY" "$EX/reference.py" $PERF
run perf-ddp 300 "$PY" "$EX/ddp_gloo.py" --replicas 2 $PERF
run perf-resihp 300 "$job" --replicas 2 -- "$PY" "$EX/train_gpt.py" $PERF --mode float32
r=$(mean_of "$logs/perf-reference.log") d=$(mean_of "$logs/perf-ddp.log") s=$(mean_of "$logs/perf-resihp.log")
if [ -n "$r" ] && [ -n "$d" ] && [ -n "$s" ]; then
  result PASS "gpt float32 step time on $dev (s, mean of steps 2..): one process $r, DDP gloo 2 ranks $d, resihp 2 replicas $s ($(awk -v s="$s" -v d="$d" 'BEGIN {printf "%.2fx DDP", s / d}'))"
else
  result FAIL "gpt float32 step times: reference '$r', DDP '$d', resihp '$s'"
fi

echo "# $(( $(date +%s) - T0 )) s" | tee -a "$summary"
tar -C "$logs" -czf "$OUT/logs.tar.gz" . && rm -rf "$logs"
exit $failed
