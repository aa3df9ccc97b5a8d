# SPDX-License-Identifier: BSD-3-Clause
# Sourced by integration tests (*.test): TAP output, a watchdog, and a real
# Slurm cluster with the freshly built plugin that is always stopped on exit.
# Needs top_srcdir/top_builddir (set by `make check`).
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
HARNESS=$top_srcdir/tests/harness
PLUGIN_SO=$top_builddir/spank/.libs/resihp.so
tap_n=0
tap_failed=0

plan() { echo "1..$1"; }
skip_all() { echo "1..0 # SKIP $*"; exit 0; }
ok() { tap_n=$((tap_n + 1)); echo "ok $tap_n - $*"; }
not_ok() { tap_n=$((tap_n + 1)); tap_failed=$((tap_failed + 1)); echo "not ok $tap_n - $*"; }
diag() { echo "# $*" | sed '2,$s/^/# /'; }
# check DESCRIPTION COMMAND...: one TAP line from a command's status
check() { local d=$1; shift; if "$@"; then ok "$d"; else not_ok "$d"; fi; }

# Waits for events (safety nets only: a test that passes never reaches them).
# wait_for FILE REGEX [TENTHS]: until a line of FILE matches (default 180 s)
wait_for() {
  local i
  for ((i = 0; i < ${3:-1800}; i++)); do grep -qE "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  return 1
}
# wait_lines FILE N: until FILE has N lines (a ledger: N committed steps)
wait_lines() {
  local i
  for ((i = 0; i < 1800; i++)); do [ "$(2>/dev/null wc -l < "$1" || echo 0)" -ge "$2" ] && return 0; sleep 0.1; done
  return 1
}
# rc NAME: the exit status a job left in $out/NAME.rc
rc() { cat "$out/$1.rc" 2>/dev/null; }
# trainer_pid R [OUTPUT]: the pid of replica R's trainer; with OUTPUT (a
# resihp-run's output, "job N: ..."), only one of that Slurm job, so that a
# trainer an earlier job left dying is never taken for it
trainer_pid() {
  local p job=
  [ -n "${2:-}" ] && job=$(sed -n 's/^resihp-run: job \([0-9][0-9]*\):.*/\1/p' "$2" | head -n 1)
  for p in $(pgrep -x resihp-trainer); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null |
      awk -v r="RESIHP_REPLICA=$1" -v j="SLURM_JOB_ID=$job" '$0 == r {a = 1} $0 == j {b = 1} END {exit !(a && (b || j == "SLURM_JOB_ID="))}' &&
      { echo "$p"; return 0; }
  done
  return 1
}

# Abort the whole file if it runs past TEST_TIMEOUT seconds (default 300).
start_watchdog() {
  local me=$$
  watchdog_s=${TEST_TIMEOUT:-${watchdog_s:-300}}
  # "&&": a sleep killed by cleanup must not fire the alarm
  ( sleep "$watchdog_s" && { echo "Bail out! timed out after $watchdog_s s"; kill -TERM "$me"; } ) &
  watchdog_pid=$!
}

# The lab's nodes share this machine's CPUs: a spare's burn-in, measured
# while the job trains, is slowed by the job itself and would refuse
# healthy spares at random. Only the burn-in's own test turns it on.
export RESIHP_NO_BURN_IN=1

# The daemons must not inherit the lock (fd 9): a test killed before its
# clean-up would leave them holding it, and every later test waiting.
cluster() { LAB=$lab "$HARNESS/lab-cluster.sh" "$@" 9>&-; }

cleanup() {
  local rc=$?
  [ -n "${lab:-}" ] && cluster stop >/dev/null 2>&1
  # what a test made outside the lab (a cgroup), undone however it ends
  [ -n "${at_exit:-}" ] && eval "$at_exit"
  # the watchdog's sleep holds our stdout open: kill it too, or the TAP
  # driver waits for it
  [ -n "${watchdog_pid:-}" ] && { pkill -P "$watchdog_pid" 2>/dev/null; kill "$watchdog_pid" 2>/dev/null; }
  [ -n "${lab:-}" ] && [ -z "${KEEP_LAB:-}" ] && rm -rf "$lab"
  exit $rc
}

# require_cluster_tools: skip (not fail) where a real cluster cannot run.
# RESIHP_SKIP_LAB (a reason) skips them all: CI's distcheck sets it, as the
# same tests ran in the source tree just before and .ci/run checks that the
# tarball ships every tracked file.
require_cluster_tools() {
  [ -z "${RESIHP_SKIP_LAB:-}" ] || skip_all "lab tests not run here: $RESIHP_SKIP_LAB"
  [ "$(id -u)" = 0 ] || skip_all "needs root to run slurmd"
  local t
  for t in slurmctld slurmd munged srun sinfo; do
    command -v "$t" >/dev/null || skip_all "$t not installed"
  done
  [ -f "$PLUGIN_SO" ] || skip_all "plugin not built at $PLUGIN_SO"
}

# require_torch: PY is Debian's python3 (the one that sees python3-torch)
# with resihp.torch from this tree and libresihp from this build, or skip.
# Set here, not for every test: srun hands RESIHP_* to tasks.
require_torch() {
  PY=${PYTHON:-/usr/bin/python3}
  export RESIHP_LIBRARY=$top_builddir/libresihp/.libs/libresihp.so
  export PYTHONPATH=$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}
  [ -f "$RESIHP_LIBRARY" ] || skip_all "libresihp not built at $RESIHP_LIBRARY"
  "$PY" -c 'import torch, torch.distributed' 2>/dev/null ||
    skip_all "$PY cannot import torch (Debian: apt-get install python3-torch)"
  "$PY" -c 'import resihp.torch' 2>/dev/null ||
    skip_all "resihp.torch not importable from $top_srcdir/python"
}

# rank_pid REPLICA PROCID PGREP-ARGS...: the pid of a task found by
# pgrep PGREP-ARGS whose environment says replica REPLICA and Slurm task
# PROCID ("-": any), as resihp-run's steps set them
rank_pid() {
  local r=$1 k=$2 p env
  shift 2
  for p in $(pgrep "$@"); do
    env=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null)
    grep -qx "RESIHP_REPLICA=$r" <<<"$env" || continue
    [ "$k" = - ] || grep -qx "SLURM_PROCID=$k" <<<"$env" || continue
    echo "$p"
    return 0
  done
  return 1
}

# lab_pgrep PGREP-ARGS...: the pids pgrep finds, only those of this lab
# cluster (their environment names its SLURM_CONF, as its sruns' and
# tasks' do): another cluster or job on the machine never counts. Exported,
# for the shells a test runs inside salloc.
lab_pgrep() {
  local p
  for p in $(pgrep "$@"); do
    tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$SLURM_CONF" && echo "$p"
  done
  return 0
}
export -f lab_pgrep

# steps_at_least NAME N: the ledger $out/NAME.ledger (resihp-run --ledger)
# holds N committed steps (waits for it; 300 s at most)
steps_at_least() {
  local i
  for ((i = 0; i < 3000; i++)); do
    [ "$(wc -l < "$out/$1.ledger" 2>/dev/null || echo 0)" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# settle_nodes: before a job that needs every node. A node still completing
# the last job's steps is waited for (120 s at most); one that Slurm drained
# because a step did not end in time ("Kill task failed") is put back, with
# a diag line. Seen here under load, rarely: a slurmstepd that reaped a
# SIGKILLed task only at UnkillableStepTimeout (60 s); its node, drained,
# then held every later allocation of the test pending until its timeout.
settle_nodes() {
  local i n
  for ((i = 0; i < 1200; i++)); do
    [ -z "$(sinfo -h -N -t completing -o %N)" ] && break
    sleep 0.1
  done
  for n in $(sinfo -h -N -t drain -o '%N %E' | awk '/Kill task failed/ {print $1}' | sort -u); do
    diag "node $n was drained by Slurm ($(sinfo -h -N -n "$n" -o %E | head -n 1)): resumed"
    scontrol update nodename="$n" state=resume
  done
}

# revive_nodes: every node whose slurmd is gone (a kill-node) started
# again; returns once all NNODES are idle (60 s at most)
revive_nodes() {
  local i
  for ((i = 1; i <= ${NNODES:-4}; i++)); do
    kill -0 "$(cat "$lab/run/slurmd-n$i.pid" 2>/dev/null)" 2>/dev/null ||
      cluster startnode "n$i" >/dev/null 2>&1
  done
  for ((i = 0; i < 600; i++)); do
    [ "$(sinfo -h -N -t idle -o "%N" | sort -u | wc -l)" -ge "${NNODES:-4}" ] && return 0
    sleep 0.1
  done
  return 1
}

# start_cluster [PLUGSTACK ARGS...]: one cluster at a time on this machine
# (they share ports), serialised with a lock held until this test exits.
start_cluster() {
  # The watchdog bounds this test, not its wait for others' tests (flock's
  # own bound is that): paused while it waits, started anew once the lab is
  # ours.
  local dog=${watchdog_pid:-}
  if [ -n "$dog" ]; then
    pkill -P "$dog" 2>/dev/null
    kill "$dog" 2>/dev/null
  fi
  exec 9>"${TMPDIR:-/tmp}/resihp-lab.lock"
  flock -w 1800 9 || { echo "Bail out! cannot lock the lab cluster"; exit 1; }
  [ -n "$dog" ] && start_watchdog
  # With the lock ours, a cluster still up on the default ports belongs to a
  # test killed before its clean-up (a make timeout): stop it.
  local old
  for old in "${TMPDIR:-/tmp}"/resihp-lab.*/; do
    grep -qsx 'SlurmctldPort=6817' "$old/etc/slurm.conf" || continue
    compgen -G "$old/run/*.pid" >/dev/null || continue
    LAB=${old%/} "$HARNESS/lab-cluster.sh" stop >/dev/null 2>&1 9>&-
  done
  lab=$(mktemp -d "${TMPDIR:-/tmp}/resihp-lab.XXXXXX")
  chmod 755 "$lab"
  trap cleanup EXIT INT TERM
  PLUGSTACK_LINE="required $PLUGIN_SO $*" cluster start || {
    echo "Bail out! Slurm lab cluster did not start"; cat "$lab"/log/*.log >&2; exit 1; }
  eval "$(cluster env)"
}

restart_cluster() { cluster stop >/dev/null 2>&1; PLUGSTACK_LINE="required $PLUGIN_SO $*" cluster start; }

finish() { [ "$tap_failed" = 0 ]; }
