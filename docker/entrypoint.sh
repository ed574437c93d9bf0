#!/usr/bin/env bash
# Container entrypoint: start the test cluster with the same launcher CI uses, then stay in the
# foreground (following the logs) until the container is stopped, and stop the cluster cleanly.
# With arguments, runs them once the cluster is up instead (e.g. `pytest -m slurm`).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${SLURM_RL_CLUSTER_DIR:-/var/tmp/slurm-rl-cluster}

"$HERE/cluster" up
eval "$("$HERE/cluster" env)"

if [ $# -gt 0 ]; then
  rc=0
  "$@" || rc=$?
  "$HERE/cluster" down
  exit $rc
fi

tail -n 0 -F "$DIR/log/slurmctld.log" "$DIR"/log/slurmd-node*.log &
TAIL=$!
trap 'kill "$TAIL" 2>/dev/null; "$HERE/cluster" down; exit 0' TERM INT
wait "$TAIL"
