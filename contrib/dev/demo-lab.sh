# SPDX-License-Identifier: BSD-3-Clause
# Sourced by the demo scripts (contrib/demo/*.sh): build resihp (installing
# missing Debian packages), then give the demo its own lab cluster directory
# with the lock, clean-up and helpers the demos share. Needs $src (the source
# tree) and $demo (the script's name, for messages). Defines: LAB (exported),
# cluster (the harness), step (a heading). The cluster is stopped and LAB
# removed on exit (KEEP_LAB=1 keeps the files).
. "$src/contrib/dev/ensure-deps.sh"
ensure_deps || exit 1
build_tree "$src" || exit 1
[ "$(id -u)" = 0 ] || { echo "$demo: run as root (the local Slurm daemons need it)" >&2; exit 1; }

LAB=$(mktemp -d "${TMPDIR:-/tmp}/resihp-demo.XXXXXX")
export LAB
chmod 755 "$LAB"
cluster() { "$src/tests/harness/lab-cluster.sh" "$@"; }
demo_cleanup() { cluster stop >/dev/null 2>&1; [ -n "${KEEP_LAB:-}" ] || rm -rf "$LAB"; }
trap demo_cleanup EXIT INT TERM
exec 9>"${TMPDIR:-/tmp}/resihp-lab.lock"
flock -w 600 9 || { echo "$demo: another resihp cluster is running" >&2; exit 1; }
step() { printf '\n== %s\n' "$*"; }
