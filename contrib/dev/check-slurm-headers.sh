#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# Compile the SPANK plugin against the public headers (slurm/*.h) of other
# Slurm releases, taken from a git clone of Slurm (SchedMD/slurm), with the
# build's own flags (-Werror included), link it, and check that every
# Slurm symbol it needs is declared by that release's spank.h.
#
#   contrib/dev/check-slurm-headers.sh BUILD_DIR SLURM_GIT_DIR TAG...
#   e.g. ... build ~/src/slurm slurm-23-02-8-1 slurm-25-11-7-1
#
# One line per tag: "TAG VERSION ok (N Slurm symbols)" or what failed.
# What it cannot check: how slurmstepd/srun of that release behave (hook
# order, what a failing hook does); see resihp(8), SLURM VERSIONS.
set -u
build=$(cd "$1" && pwd) git_dir=$2; shift 2
src=$(cd "$(dirname "$0")/../.." && pwd)
flags=$(printf 'p:\n\t@echo $(DEFS) $(DEFAULT_INCLUDES) $(AM_CPPFLAGS) $(CPPFLAGS) $(AM_CFLAGS) $(CFLAGS)\n' |
  make -s --no-print-directory -C "$build" -f Makefile -f - p)
core=$build/libresihp/.libs/libresihp-core.a
[ -f "$core" ] || { echo "build $build first (no $core)" >&2; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
fail=0
for tag in "$@"; do
  h=$work/$tag; mkdir -p "$h/slurm" "$h/obj"
  for f in spank.h slurm_errno.h slurm.h; do
    git -C "$git_dir" show "$tag:slurm/$f" > "$h/slurm/$f" 2>/dev/null
  done
  # the version, as Slurm's configure writes it: slurm-23-02-8-1 -> 23.02.8
  IFS=- read -r _ ma mi mc _ <<<"$tag"
  num=$(printf '0x%02x%02x%02x' "$((10#$ma))" "$((10#$mi))" "$((10#$mc))")
  git -C "$git_dir" show "$tag:slurm/slurm_version.h.in" 2>/dev/null |
    sed "s/^#undef SLURM_VERSION_NUMBER/#define SLURM_VERSION_NUMBER $num/" > "$h/slurm/slurm_version.h"
  ok=1 why=
  for c in "$src"/spank/*.c; do
    # shellcheck disable=SC2086
    (cd "$build" && gcc $flags -fPIC -I"$h" -I"$src/libresihp/probe" -Werror=implicit-function-declaration \
      -c "$c" -o "$h/obj/$(basename "$c" .c).o") 2> "$h/err" || { ok=0; why="$(basename "$c"): $(grep -m1 error "$h/err")"; break; }
  done
  if [ $ok = 1 ] && ! gcc -shared -o "$h/resihp.so" "$h"/obj/*.o "$core" -pthread \
       -Wl,--version-script="$src/spank/resihp.map" 2> "$h/err"; then
    ok=0 why="link: $(head -n1 "$h/err")"
  fi
  n=0
  if [ $ok = 1 ]; then
    for s in $(nm -u "$h/resihp.so" | awk '{print $2}' | grep -E '^(spank_|slurm_)'); do
      n=$((n + 1))
      grep -qE "\\b$s\\b *\\(" "$h/slurm/spank.h" || { ok=0; why="$why $s not declared in spank.h"; }
    done
  fi
  # the release it is tied to: slurmstepd/srun load a SPANK plugin only
  # when this matches their own major.minor (src/common/plugin.c)
  if [ $ok = 1 ]; then
    pv=$(python3 -c 'import ctypes, os, sys
l = ctypes.CDLL(sys.argv[1], mode=os.RTLD_LAZY)
print("0x%06x" % ctypes.c_uint.in_dll(l, "plugin_version").value)' "$h/resihp.so" 2>&1)
    [ "$pv" = "$num" ] || { ok=0; why="$why plugin_version $pv, not $num"; }
  fi
  if [ $ok = 1 ]; then echo "$tag $ma.$mi.$mc ok ($n Slurm symbols, plugin_version $pv)"
  else echo "$tag $ma.$mi.$mc FAILED:$why"; fail=1; fi
done
exit $fail
