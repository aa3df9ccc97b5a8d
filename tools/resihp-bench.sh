#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp-bench.sh: resihp's fault-tolerant all-reduce against Open MPI's
# MPI_Allreduce on loopback, side by side, in one run.
#
#   tools/resihp-bench.sh [--quick|--full] [--ranks "2 4 8"]
#
# Columns (bus bandwidth, GB/s, float32 sum, separate send/receive buffers):
#   ft      resihp, fault tolerant (monitor thread, DONE round), default
#           host transport: shared-memory rings between ranks of one host,
#           direct exchange for small buffers (small-max)
#   ring    ft with the ring at every size (small-max=0): the algorithm
#           small buffers took before
#   1copy   ft with single-copy=yes (process_vm_readv from 256 KiB)
#   fttcp   the same over TCP only (the medium of Open MPI's tcp BTL)
#   ftip    resihp, fault tolerant, in place (+ private copy of the input)
#   noft    resihp, unprotected ring (what fault tolerance costs)
#   det     resihp, fault tolerant + deterministic fixed point (int64 sums,
#           int32 on the wire where exact)
#   mac     ft with mac-data: a MAC over every gradient byte on socket
#           links (all modes MAC control frames and the frame headers on
#           sockets; frames through shared-memory rings carry no MAC, so on
#           one host this equals ft)
#   mactcp  the same over TCP only
#   mpi-sm  Open MPI, --mca btl self,vader,tcp (shared memory on one node)
#   mpi-tcp Open MPI, --mca btl self,tcp over lo
#   memcpy  the copy limit: a single-thread memcpy of that many bytes
#           between two distinct pre-faulted buffers, timed by rank 0 of the
#           resihp run in the same process, interleaved with its modes (GB/s
#           copied, no bus factor)
# ft/sm = ft / mpi-sm, tcp/t = fttcp / mpi-tcp, ft/cpy = ft / memcpy (the
# share of the copy limit reached; issue 16 asks >= 0.6 at 2 ranks for
# large messages), ft-cost = 1 - ft/noft, mac-cost = 1 - mac/ft (what
# mac-data costs), mactcp-c = 1 - mactcp/fttcp.
# --quick (default): 4 KiB .. 16 MiB; --full: 4 KiB .. 256 MiB. The build
# tree is $BUILD_DIR (default: <source>/build). The resihp columns are the
# modes of resihp-bench-allreduce named in $cols below, in that order: a
# mode added to its table shows once its name is added there.
set -u
src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$src/build}
size=--quick
ranks="2 4 8"
while [ $# -gt 0 ]; do
  case $1 in
    --quick|--full) size=$1 ;;
    --ranks) ranks=$2; shift ;;
    -h|--help) sed -n '2,36p' "$0"; exit 0 ;;
    *) echo "resihp-bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
cols="ft ring 1copy fttcp ftip noft det mac mactcp"
bench=$build/tools/resihp-bench-allreduce
mpib=$build/tools/resihp-bench-mpi
[ -x "$bench" ] || { echo "resihp-bench.sh: build first (make -C $build)" >&2; exit 1; }
out=$(mktemp)
trap 'rm -f "$out"' EXIT
mpirun_ok=0
if [ -x "$mpib" ] && command -v mpirun >/dev/null; then mpirun_ok=1; fi
mpi=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1)
for n in $ranks; do
  "$bench" --ranks "$n" "$size" >>"$out" || echo "resihp-bench.sh: resihp n=$n failed" >&2
  if [ $mpirun_ok = 1 ]; then
    "${mpi[@]}" -np "$n" --mca btl self,vader,tcp "$mpib" --label sm "$size" >>"$out" 2>/dev/null ||
      echo "resihp-bench.sh: mpirun (vader) n=$n failed" >&2
    "${mpi[@]}" -np "$n" --mca btl self,tcp --mca btl_tcp_if_include lo "$mpib" --label tcp "$size" >>"$out" 2>/dev/null ||
      echo "resihp-bench.sh: mpirun (tcp) n=$n failed" >&2
  fi
done
awk -v cols="$cols" '
  { key = $3 " " $4; bw[$2, key] = $7; keys[key] = 1 }
  function v(m, k) { return ((m, k) in bw) ? sprintf("%6.2f", bw[m, k]) : "     -" }
  function ratio(a, b, k) { return (((a, k) in bw) && ((b, k) in bw) && bw[b, k] > 0) ? sprintf("%6.2f", bw[a, k] / bw[b, k]) : "     -" }
  function cost(a, b, k, w) { return (((a, k) in bw) && ((b, k) in bw) && bw[b, k] > 0) ? sprintf("%" (w - 1) ".1f%%", 100 * (1 - bw[a, k] / bw[b, k])) : sprintf("%" w "s", "-") }
  function hum(b) { return b >= 1048576 ? (b / 1048576) "M" : (b / 1024) "K" }
  END {
    nc = split(cols, col, " ")
    printf "%5s %5s |", "ranks", "bytes"
    for (c = 1; c <= nc; c++) printf " %6s", col[c]
    printf " | %6s %6s %6s | %6s %6s %6s %7s %8s %8s\n", "mpi-sm", "mpitcp", "memcpy", "ft/sm", "tcp/t", "ft/cpy", "ft-cost", "mac-cost", "mactcp-c"
    n = 0; for (k in keys) list[++n] = k
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) {
      split(list[i], a, " "); split(list[j], b, " ")
      if (a[1] + 0 > b[1] + 0 || (a[1] == b[1] && a[2] + 0 > b[2] + 0)) { t = list[i]; list[i] = list[j]; list[j] = t }
    }
    for (i = 1; i <= n; i++) {
      k = list[i]; split(k, a, " ")
      printf "%5s %5s |", a[1], hum(a[2])
      for (c = 1; c <= nc; c++) printf " %s", v(col[c], k)
      printf " | %s %s %s | %s %s %s %s %s %s\n", v("sm", k), v("tcp", k), v("memcpy", k), ratio("ft", "sm", k), ratio("fttcp", "tcp", k), ratio("ft", "memcpy", k), cost("ft", "noft", k, 7), cost("mac", "ft", k, 8), cost("mactcp", "fttcp", k, 8)
    }
  }' "$out"
