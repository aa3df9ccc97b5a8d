#!/bin/bash
# SPDX-License-Identifier: BSD-3-Clause
# resihp plugin demo: builds resihp, starts a real 4-node
# Slurm cluster on this machine with the freshly built plugin, and shows a
# resilient step next to a plain one. Always stops the cluster on exit.
# Run as root (slurmd needs it). Env: KEEP_LAB=1 keeps the cluster's files.
set -u
src=$(cd "$(dirname "$0")/../.." && pwd)
demo=run-demo
. "$src/contrib/dev/demo-lab.sh"
PLUGSTACK_LINE="required $src/build/spank/.libs/resihp.so detect-timeout=1000" cluster start || exit 1
eval "$(cluster env)"
sinfo -N -o '  %N %T %c CPUs'

step "plain step (no --resilient): the plugin stays out of the way"
srun -N4 -n4 -l bash -c 'echo "$SLURMD_NODENAME RESIHP vars: $(env | grep -c ^RESIHP_)"' | sort

step "srun --resilient=detect-timeout=500ms,deterministic,transport=tcp: settings reach every rank"
srun -N4 -n4 -l --resilient=detect-timeout=500ms,deterministic,transport=tcp \
  bash -c 'echo "$SLURMD_NODENAME $(env | grep ^RESIHP_ | sort | tr "\n" " ")"' | sort

step "what a rank sees: resihp-info inside a resilient step on node n2"
srun -N1 -w n2 --resilient=heartbeat=50 "$src/build/tools/resihp-info" --settings-only

step "a typo is refused before anything runs"
srun -N1 --resilient=detect-timeout=fast true
echo "srun exit code: $?"

printf '\nDemo finished: plugin %s on %s slurmd nodes (Slurm %s).\n' \
  "$(basename "$src/build/spank/.libs/resihp.so")" "$(sinfo -h -N | wc -l)" "$(sinfo -V | awk '{print $2}')"
