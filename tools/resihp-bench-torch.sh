#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp-bench-torch.sh: what resihp costs a PyTorch job when nothing
# fails, measured against stock torch.distributed DDP (gloo).
#
# Trains the GPT example (contrib/torch-gpt: same model, data, dropout
# masks, optimizer everywhere) with R replicas of M microbatches per step,
# --threads torch threads per process, and prints the mean step time
# (warm-up steps left out) side by side of:
#   reference      reference.py: one process computes all M (compute alone)
#   gloo DDP       ddp_gloo.py: stock DistributedDataParallel, R processes
#                  here, gloo all-reduce (the baseline)
#   float32        train_gpt.py under resihp-run, R replicas, --mode float32
#   deterministic  the same, --mode deterministic (int64 fixed-point sums)
#   bfloat16       the same, --mode bfloat16 (with --bfloat16)
# Each is run --repeat times, interleaved (a change of load hits all alike);
# the table gives the median. DDP's step: zero_grad to optimizer step on
# the slowest rank. resihp's step: one begin_step to the next on replica 0,
# everything the Trainer does per step included; its split (compute,
# exchange, optimizer, commit, step boundary) is timed by wrapping the
# Trainer's methods from outside (nothing in resihp.torch is changed).
# All replicas share this machine's cores: the overhead against DDP on the
# same cores is the figure, not the absolute times. Besides the medians it
# prints the overhead run by run (each resihp run against the DDP run next
# to it) and the CPU seconds per step summed over all processes, which the
# load of others moves far less than wall times.
#
# Inside an allocation of R nodes (salloc --no-kill -N R) it uses it;
# otherwise (as root) it starts a private lab cluster of R nodes
# (tests/harness/lab-cluster.sh, ports BASEPORT+1.. and CTLDPORT, default
# 47200 and 9837, so that it never meets the test suite's) and always stops
# it on exit.
#
# usage: resihp-bench-torch.sh [--quick] [--replicas R] [--microbatches M]
#          [--steps N] [--warmup W] [--repeat K] [--threads T] [--layers L]
#          [--d-model D] [--ctx C] [--batch B] [--bfloat16]
#          [--no-reference] [--builddir DIR] [--python PY] [--keep]
#   --quick  a tiny model (1 layer, d 32, ctx 16, batch 2, M 4, 8 steps,
#            one run each): fixed per-step costs dominate
# env: BASEPORT (47200), CTLDPORT (9837), SLURMD_TIMEOUT (300), LAB
set -u
me=resihp-bench-torch
src=$(cd "$(dirname "$0")/.." && pwd)
B=$src/build PY=/usr/bin/python3 KEEP=0 BF16=0 REF=1 QUICK=0
declare -A opt
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) opt[R]=$2; shift ;;
    --microbatches) opt[M]=$2; shift ;;
    --steps) opt[N]=$2; shift ;;
    --warmup) opt[W]=$2; shift ;;
    --repeat) opt[K]=$2; shift ;;
    --threads) opt[T]=$2; shift ;;
    --layers) opt[L]=$2; shift ;;
    --d-model) opt[D]=$2; shift ;;
    --ctx) opt[C]=$2; shift ;;
    --batch) opt[BATCH]=$2; shift ;;
    --quick) QUICK=1 ;;
    --bfloat16) BF16=1 ;;
    --no-reference) REF=0 ;;
    --builddir) B=$2; shift ;;
    --python) PY=$2; shift ;;
    --keep) KEEP=1 ;;
    -h|--help) awk 'NR > 2 && !/^#/ {exit} NR > 2 {sub(/^# ?/, ""); print}' "$0"; exit 0 ;;
    *) echo "$me: unknown option '$1' (see --help)" >&2; exit 1 ;;
  esac
  shift
done
if [ $QUICK = 1 ]; then
  R=2 M=4 N=8 W=2 K=1 T=1 L=1 D=32 C=16 BATCH=2
else
  R=2 M=8 N=10 W=2 K=3 T=1 L=2 D=128 C=64 BATCH=4
fi
for k in "${!opt[@]}"; do
  case ${opt[$k]} in
    ''|*[!0-9]*) echo "$me: '${opt[$k]}' is not a number" >&2; exit 1 ;;
  esac
  printf -v "$k" %s "${opt[$k]}"
done
[ "$R" -ge 1 ] && [ "$M" -ge "$R" ] && [ "$K" -ge 1 ] && [ "$N" -gt "$W" ] ||
  { echo "$me: need --replicas >= 1, --microbatches >= --replicas, --repeat >= 1, --steps > --warmup" >&2; exit 1; }

EX=$src/contrib/torch-gpt
RUN=$B/tools/resihp-run
export RESIHP_LIBRARY=$B/libresihp/.libs/libresihp.so
export PYTHONPATH=$src/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONDONTWRITEBYTECODE=1 BENCH_EXAMPLES=$EX
for x in "$RUN" "$RESIHP_LIBRARY" "$B/spank/.libs/resihp.so" "$EX/train_gpt.py"; do
  [ -e "$x" ] || { echo "$me: $x not found: build first (tests/run-tests.sh, or configure + make in $B; --builddir)" >&2; exit 1; }
done
"$PY" -c 'import torch, torch.distributed, resihp.torch' 2>/dev/null ||
  { echo "$me: $PY cannot import torch and resihp.torch (Debian: apt-get install python3-torch; --python)" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/$me.XXXXXX")
lab=""
cleanup() {
  if [ -n "$lab" ]; then
    LAB=$lab "$src/tests/harness/lab-cluster.sh" stop >/dev/null 2>&1
    [ $KEEP = 1 ] || rm -rf "$lab"
  fi
  if [ $KEEP = 1 ]; then echo "$me: files kept in $work${lab:+ and $lab}"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Allocation: the current one, else a private lab cluster of R nodes.
if [ -n "${SLURM_JOB_ID:-}" ]; then
  alloc=()
else
  [ "$(id -u)" = 0 ] || { echo "$me: run it as root (it starts a lab cluster) or inside an allocation: salloc --no-kill -N$R $0" >&2; exit 1; }
  export BASEPORT=${BASEPORT:-47200} CTLDPORT=${CTLDPORT:-9837} SLURMD_TIMEOUT=${SLURMD_TIMEOUT:-300}
  for p in "$CTLDPORT" $(seq $((BASEPORT + 1)) $((BASEPORT + R))); do
    ! ss -Htln "sport = :$p" 2>/dev/null | grep -q . ||
      { echo "$me: port $p is in use: choose others with BASEPORT=... CTLDPORT=..." >&2; exit 1; }
  done
  lab=${LAB:-$work/lab}
  mkdir -p "$lab" && chmod 755 "$work" "$lab"
  LAB=$lab NNODES=$R PLUGSTACK_LINE="required $B/spank/.libs/resihp.so" \
    "$src/tests/harness/lab-cluster.sh" start 2> "$work/lab.log" ||
    { echo "$me: the lab cluster did not start:" >&2; cat "$work/lab.log" "$lab"/log/*.log >&2; exit 1; }
  eval "$(LAB=$lab "$src/tests/harness/lab-cluster.sh" env)"
  alloc=(salloc -Q --no-kill -N"$R")
fi

# The profiler: runs an example (train_gpt.py, ddp_gloo.py) with its steps
# timed from outside (functions wrapped; nothing in them changed). resihp:
# the Trainer's parts, each replica writing $BENCH_PROFILE.<replica>; DDP:
# common.train_step in every rank (spawned ranks run this file's top level
# as __mp_main__, so they are wrapped too), a line per step appended to
# $BENCH_PROFILE.cpu.<pid> (the ranks leave by os._exit). CPU seconds
# (process_time: every thread) are taken with the wall times: they change
# far less than wall times with the load of others on a shared machine.
cat > "$work/prof.py" <<'EOF'
import importlib, json, os, sys, time
sys.path.insert(0, os.environ["BENCH_EXAMPLES"])
import common
import resihp.job as J
from resihp.torch import grads as G, state as S, trainer as T
ev, who = [], {}
def timed(cls, name, key):
    f = getattr(cls, name)
    def w(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        try:
            return f(*a, **k)
        finally:
            ev.append((key, t0, time.perf_counter(), c0))
            if key == "begin":
                who["replica"] = a[0].replica
    setattr(cls, name, w)
for cls, name, key in ((J.Job, "begin_step", "begin"), (J.Job, "end_step", "end"),
                       (J.Job, "allreduce", "allreduce"),
                       (G.Gradients, "start", "start"),
                       (G.Gradients, "add_microbatch", "add_mb"),
                       (G.Gradients, "exchange", "exchange"),
                       (T.Trainer, "_commit", "commit"),
                       (S.ReplicaState, "commit", "state")):
    timed(cls, name, key)
train_step = common.train_step
def ddp_step(*a, **k):
    c0 = time.process_time()
    r = train_step(*a, **k)
    with open("%s.cpu.%d" % (os.environ["BENCH_PROFILE"], os.getpid()), "a") as f:
        f.write("%.6f %.6f\n" % (r[1], time.process_time() - c0))
    return r
common.train_step = ddp_step

def dump():
    # step i: from its begin_step call to the next one (the last call says done)
    b = sorted((t0, c0) for k, t0, _, c0 in ev if k == "begin")
    steps = []
    for i in range(len(b) - 1):
        s = {"period": b[i + 1][0] - b[i][0], "cpu": b[i + 1][1] - b[i][1]}
        for k, t0, t1, _ in ev:
            if b[i][0] <= t0 < b[i + 1][0]:
                s[k] = s.get(k, 0.0) + t1 - t0
                if k == "exchange" and "x0" not in s:
                    s["x0"], s["x1"] = t0, t1  # this machine's clock: the
                    # replicas' are compared (who waited for whom)
        steps.append(s)
    with open("%s.%s" % (os.environ["BENCH_PROFILE"], who.get("replica", "x")), "w") as f:
        json.dump(steps, f)

if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    mod = importlib.import_module(os.path.basename(script)[:-3])
    try:
        mod.main()
    finally:
        if ev:
            dump()
EOF

MODEL=(--layers "$L" --d-model "$D" --ctx "$C" --batch "$BATCH" --microbatches "$M"
       --steps "$N" --threads "$T")
bad=0
# measure NAME REPEAT: one run, JSON in $work/NAME.REPEAT.json
measure() {
  local name=$1 k=$2 f=$work/$1.$2 rc
  case $name in
    reference) BENCH_PROFILE=$f.prof timeout 3600 "$PY" "$work/prof.py" "$EX/reference.py" \
                 "${MODEL[@]}" --json "$f.json" ;;
    ddp) BENCH_PROFILE=$f.prof timeout 3600 "$PY" "$work/prof.py" "$EX/ddp_gloo.py" \
           "${MODEL[@]}" --replicas "$R" --json "$f.json" ;;
    *) BENCH_PROFILE=$f.prof timeout 3600 "${alloc[@]}" "$RUN" --quiet --progress 0 \
         --replicas "$R" -- "$PY" "$work/prof.py" "$EX/train_gpt.py" "${MODEL[@]}" \
         --mode "$name" --json "$f.json" ;;
  esac > "$f.out" 2> "$f.err"
  rc=$?
  if [ $rc != 0 ] || [ ! -s "$f.json" ]; then
    echo "  $name (run $k): exit $rc: $(tail -3 "$f.err")" >&2
    bad=1
  fi
}

names=()
[ $REF = 1 ] && names+=(reference)
names+=(ddp float32 deterministic)
[ $BF16 = 1 ] && names+=(bfloat16)
ncores=$(nproc)
echo "$me: GPT ${L} layers, d_model $D, ctx $C, batch $BATCH; $M microbatches x $N steps (first $W not timed);"
echo "  $R replicas x $T thread(s); median of $K interleaved run(s) each"
echo "  NOTE: every process shares this machine's $ncores core(s) (load now: $(cut -d' ' -f1-3 /proc/loadavg)):"
echo "  the absolute times are this machine's; the overhead against gloo DDP on the same cores is what counts"
for ((k = 1; k <= K; k++)); do
  for n in "${names[@]}"; do measure "$n" "$k"; done
done

"$PY" - "$work" "$W" "$K" "$R" "$M" "${names[@]}" <<'EOF' || bad=1
import glob, json, os, statistics as st, sys
work, W, K, R, M, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6:]
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
runs = {}  # name -> [(mean step s, json, profile of replica 0, run)]
for n in names:
    for k in range(1, K + 1):
        j = load("%s/%s.%d.json" % (work, n, k))
        if j is None:
            continue
        prof = load("%s/%s.%d.prof.0" % (work, n, k))
        if prof:  # resihp: begin_step to begin_step, everything included
            t = [s["period"] for s in prof][W:]
            # the first exchange of each step: the replica last to get there
            # (after its backward) and replica 0's wait for it
            peers = [load("%s/%s.%d.prof.%d" % (work, n, k, r)) for r in range(1, R)]
            for i, s in enumerate(prof):
                x = [s.get("x0")] + [p[i].get("x0") if p and i < len(p) else None for p in peers]
                if None not in x:
                    s["wait"] = max(x) - x[0]
                    s["comm"] = max(0.0, s["x1"] - max(x))
            cpu = [sum(p[i]["cpu"] for p in [prof] + peers) for i in range(W, len(prof))]
        else:
            t = j["times"][W:]
            ranks = []
            for fn in glob.glob("%s/%s.%d.prof.cpu.*" % (work, n, k)):
                with open(fn) as f:
                    ranks.append([float(l.split()[1]) for l in f])
            cpu = [sum(c[i] for c in ranks) for i in range(W, min(map(len, ranks)))] if ranks else []
        c = sum(cpu) / len(cpu) if cpu else float("nan")
        runs.setdefault(n, []).append((sum(t) / len(t), j, prof, k, c))
label = {"reference": "reference (1 process, all M)", "ddp": "gloo DDP (baseline)",
         "float32": "resihp float32", "deterministic": "resihp deterministic",
         "bfloat16": "resihp bfloat16"}
med = {n: st.median(r[0] for r in v) for n, v in runs.items()}
cmed = {n: st.median(r[4] for r in v) for n, v in runs.items()}
base, cbase = med.get("ddp"), cmed.get("ddp")
print("  %-30s %12s %12s %12s %8s   %s" % ("run", "mean step s", "vs gloo DDP",
      "CPU s/step", "vs DDP", "each run (s)"))
for n in names:
    if n not in med:
        print("  %-30s %12s" % (label[n], "failed"))
        continue
    rel = "%+.1f %%" % (100 * (med[n] / base - 1)) if base else "-"
    crel = "%+.1f %%" % (100 * (cmed[n] / cbase - 1)) if cbase else "-"
    if n == "reference":
        rel = "(x%.2f)" % (med[n] / base) if base else "-"
        crel = ""
    print("  %-30s %12.4f %12s %12.4f %8s   %s" % (label[n], med[n], rel, cmed[n], crel,
          " ".join("%.3f" % r[0] for r in runs[n])))
if "reference" in med:
    print("  %-30s %12.4f %12s" % ("ideal: reference / R", med["reference"] / R,
          "%+.1f %%" % (100 * (med["reference"] / R / base - 1)) if base else "-"))
# The same ratio run by run (each resihp run next to its DDP run): less
# sensitive to the load changing between repeats.
paired = {}
for n in names:
    if n in ("ddp", "reference") or n not in runs or "ddp" not in runs:
        continue
    d = {r[3]: r[0] for r in runs["ddp"]}
    q = [100 * (r[0] / d[r[3]] - 1) for r in runs[n] if r[3] in d]
    if q:
        paired[n] = st.median(q)
        print("  %-36s %+.1f %% (median of run-by-run: %s)" % (
            label[n] + " vs DDP, paired", paired[n], " ".join("%+.0f" % x for x in q)))
print("  (step s: wall time, the table's figure; CPU s/step: summed over every process of")
print("  the run, all threads: what the step costs in cores, less moved by others' load)")
if "float32" in med and "deterministic" in med:
    print("  deterministic mode costs %+.1f %% of the float32 step (%+.4f s); in CPU %+.1f %%" % (
        100 * (med["deterministic"] / med["float32"] - 1), med["deterministic"] - med["float32"],
        100 * (cmed["deterministic"] / cmed["float32"] - 1)))
if base and "float32" in med:
    o = 100 * (med["float32"] / base - 1)
    o = paired.get("float32", o)
    print("  float32 overhead vs gloo DDP (paired): %+.1f %% (goal <= 5 %%): %s" % (
        o, "met" if o <= 5 else "NOT met"))
# Where resihp's step goes: replica 0, mean per timed step, the run nearest
# the median.
keys = (("begin", "begin_step (step boundary, peers)"), ("start", "zero gradients"),
        ("compute", "forward + backward"), ("add_mb", "  of which add_microbatch"),
        ("exchange", "exchange after backward"), ("optimizer", "optimizer step"),
        ("state", "state commit (meta encode)"), ("end", "end_step (commit)"),
        ("allreduce", "all-reduce calls (overlap incl.)"),
        ("wait", "exchange: waiting for a slower peer"),
        ("comm", "exchange: after the last peer's bwd"))
rows = {}
for n in ("float32", "deterministic", "bfloat16"):
    if n not in runs:
        continue
    r = min(runs[n], key=lambda x: abs(x[0] - med[n]))
    steps = (r[2] or [])[W:]
    if not steps:
        continue
    agg = {}
    for s in steps:
        g = dict(s)
        g["optimizer"] = s.get("commit", 0) - s.get("state", 0) - s.get("end", 0)
        g["compute"] = s["period"] - sum(s.get(k, 0) for k in ("begin", "start", "exchange", "commit"))
        for k, v in g.items():
            if k not in ("x0", "x1"):
                agg[k] = agg.get(k, 0.0) + v / len(steps)
    rows[n] = agg
if rows:
    ms = list(rows)
    print("  where resihp's step goes (replica 0, ms per step):")
    print("    %-34s" % "" + "".join("%15s" % m for m in ms))
    for k, what in (("period", "step"),) + keys:
        print("    %-34s" % what + "".join("%15.1f" % (1000 * rows[m].get(k, 0)) for m in ms))
    if base:
        print("    %-34s" % "gloo DDP step" + "%15.1f" % (1000 * base))
    # Bottom-up: what resihp adds on the step's path, measured directly
    # (little moved by others' load, unlike the difference of two steps).
    own = ("begin", "start", "add_mb", "comm", "state", "end")
    print("  resihp's own part of the step (step boundary, zeroing, add_microbatch,")
    print("  exchange after the last peer's backward, state commit, end_step):")
    for m in ms:
        x = sum(rows[m].get(k, 0) for k in own)
        print("    %-14s %7.1f ms = %4.1f %% of its step" % (m, 1000 * x, 100 * x / rows[m]["period"]))
digs = {r[1].get("digest") for r in runs.get("deterministic", [])}
if len(digs) > 1:
    print("  deterministic runs ended in different states: %s" % sorted(digs))
    sys.exit(1)
if digs:
    print("  deterministic runs: same final state in every run (%s...)" % next(iter(digs))[:16])
EOF
exit $bad
