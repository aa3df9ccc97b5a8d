#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Regenerates tests/tools/report/run.events, the fixture of report.test,
# from a real resihp-run on the lab Slurm cluster (root; takes the lab
# lock like the integration tests; about a minute). Every kind of event in
# one run, the faults from outside where they can be:
#   - a rank killed (--inject kill-rank:0@150): failure, admitted,
#     recovered on a spare (spare "taken");
#   - replica 1 slowed x2 from step 400 (--inject slow-rank): slow, then a
#     swap for a spare (--swap-cost 0.2);
#   - the spare n6 fails its health probe (the plugin's test hook): spare
#     "failed-probe"; the others register "ready";
#   - the coordinator SIGKILLed from outside after the swap: failover,
#     a second "coordinator" event (standby);
#   - saves every 200 steps (--state-dir), progress lines, the summary.
# Usage (from the build tree): top_srcdir=SRC top_builddir=BUILD \
#   SRC/tests/tools/report/make-fixture.sh [OUT.events]
. "${top_srcdir:-$(dirname "$0")/../../..}/tests/harness/tap.sh"
require_cluster_tools
RUN=$top_builddir/tools/resihp-run
TRAINER=$top_builddir/contrib/trainer/resihp-trainer
dest=${1:-$top_srcdir/tests/tools/report/run.events}
export NNODES=6 SLURMD_TIMEOUT=300
TEST_TIMEOUT=600 start_watchdog
start_cluster probe-interval=0 test-fail=mem test-fail-node=n6
out=$lab/out; mkdir -p "$out"
export RESIHP_SECRET_DIR=$out
settle_nodes
(timeout 300 salloc -Q --no-kill -N6 "$RUN" --replicas 2 --spares 4 \
   --wait-for-replacements --events "$out/run.events" --ledger "$out/run.ledger" \
   --state-dir "$out/state" --save-every 200 --swap-cost 0.2 \
   --inject kill-rank:0@150,slow-rank:1@400x2 -- \
   "$TRAINER" --steps 1200 --microbatches 12 --mb-ms 4 --print-every 0 \
   > "$out/run" 2>&1; echo $? > "$out/run.rc") &
wait_for "$out/run.events" '"event":"swap"' 3000 || { cat "$out/run"; exit 1; }
p=$(sed -n 's/.*"event":"coordinator".*"reason":"pid \([0-9]*\)".*/\1/p' "$out/run.events" | head -1)
kill -KILL "$p"
for ((i = 0; i < 3000; i++)); do [ -s "$out/run.rc" ] && break; sleep 0.1; done
grep -v '^\[replica' "$out/run" | tail -n 40
echo "exit status: $(cat "$out/run.rc")"
# the lab's job id and pids are kept: they are what a real file holds
cp "$out/run.events" "$dest"
echo "wrote $dest ($(wc -l < "$dest") events)"
