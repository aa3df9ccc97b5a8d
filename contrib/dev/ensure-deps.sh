# SPDX-License-Identifier: BSD-3-Clause
# Sourced by .ci/run, tests/run-tests.sh and the demo: install the Debian
# packages resihp needs (only what is missing; needs root) and build the tree
# out of source in $BUILD_DIR (default: <source>/build). python3-matplotlib
# draws resihp-report's reports; chromium is for its test in a real
# headless browser (tests/tools/report-browser.test); MariaDB's server and
# client cores, slurmdbd and its MySQL plugin let slurm-record.test start a
# private accounting database, so that it checks what sacct shows (their
# packages start no daemon).
RESIHP_DEBS="gcc make autoconf automake libtool pkg-config
  libslurm-dev libpmix-dev libhwloc-dev check
  slurm-wlm slurmctld slurmd slurm-client munge
  openmpi-bin libopenmpi-dev
  bc iproute2 procps util-linux psmisc
  python3 python3-torch
  python3-matplotlib chromium
  mariadb-server-core mariadb-client-core slurmdbd slurm-wlm-mysql-plugin"

ensure_deps() {
  local missing=() p
  for p in $RESIHP_DEBS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} = 0 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "resihp: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
    return 1
  fi
  echo "resihp: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# build_tree SRC [configure args...]
build_tree() {
  local src=$1; shift
  local build=${BUILD_DIR:-$src/build}
  if [ ! -x "$src/configure" ] || [ "$src/configure.ac" -nt "$src/configure" ]; then
    (cd "$src" && autoreconf -fi >/dev/null 2>&1) || { echo "resihp: autoreconf failed" >&2; return 1; }
  fi
  mkdir -p "$build"
  if [ ! -f "$build/config.status" ] || [ -n "${RECONFIGURE:-}" ]; then
    (cd "$build" && "$src/configure" "$@" > configure.out) || { cat "$build/configure.out"; echo "resihp: configure failed" >&2; return 1; }
    tail -n 14 "$build/configure.out"
  fi
  make -C "$build" -j"$(nproc)" >/dev/null || { make -C "$build" 2>&1 | tail -40; return 1; }
}
