#!/usr/bin/env bash
# Entrypoint of the dockerized test cluster's containers (docker/cluster --engine docker).
#
#   node-entrypoint.sh slurmctld        munged, then slurmctld in the foreground
#   node-entrypoint.sh slurmd NODE      munged, fake GPUs, then slurmd -N NODE in the foreground
#   node-entrypoint.sh slurmdbd         munged, MariaDB (the image's empty accounting database,
#                                       on 127.0.0.1:3306), then slurmdbd in the foreground
#   node-entrypoint.sh accounts         munged, then, once slurmdbd answers, each command of
#                                       ${SLURM_RL_DIR}/etc/accounts.sacctmgr with sacctmgr -i
#                                       (docker/compose.yaml; docker/cluster does it from the host)
#   node-entrypoint.sh run CMD...       munged, then CMD (e.g. the slurm-rl daemon)
#
# Environment (set by docker/cluster_docker.py): SLURM_RL_DIR (the cluster directory; its etc/
# and log/ are mounted from the host at the same path), SLURM_CONF, SLURM_RL_GPUS_PER_NODE.
# The munge key is mounted read-only at /etc/slurm-rl/munge.key; every container runs its own
# munged with it on ${SLURM_RL_DIR}/munge/munge.socket (the path slurm.conf names).
# When the host's /etc is mounted at /run/host-etc, users and groups come from it, so jobs
# submitted on the host run as the same users in the containers (like NSS on a real cluster).
set -euo pipefail
umask 022

DIR=${SLURM_RL_DIR:?SLURM_RL_DIR is not set}
GPUS=${SLURM_RL_GPUS_PER_NODE:-4}
KEY=/etc/slurm-rl/munge.key
SOCKET="$DIR/munge/munge.socket"

die() { printf 'node-entrypoint: error: %s\n' "$*" >&2; exit 1; }

if [ -r /run/host-etc/passwd ] && [ -r /run/host-etc/group ]; then
  ln -sf /run/host-etc/passwd /etc/passwd
  ln -sf /run/host-etc/group /etc/group
fi

[ -r "$KEY" ] || die "munge key $KEY is not mounted"
mkdir -p "$DIR/munge" "$DIR/run" "$DIR/log"
chmod 755 "$DIR" "$DIR/munge" "$DIR/run"
rm -f "$SOCKET" "$SOCKET.lock"
munged --socket="$SOCKET" --key-file="$KEY" --pid-file="$DIR/munge/munged.pid" \
  --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed" --num-threads=4 ||
  die "munged did not start: $(tail -n 5 "$DIR/munge/munged.log" 2>/dev/null)"
for _ in $(seq 100); do
  munge -n -S "$SOCKET" 2>/dev/null | unmunge -S "$SOCKET" >/dev/null 2>&1 && break
  sleep 0.1
done

role=${1:-}
shift || true
case "$role" in
  slurmctld)
    mkdir -p "$DIR/state/slurmctld"
    exec slurmctld -D -f "$SLURM_CONF"
    ;;
  slurmd)
    node=${1:?slurmd needs a node name}
    n=${node#node}
    [[ "$n" =~ ^[0-9]+$ ]] || die "node name must be nodeN, not $node"
    mkdir -p "$DIR/spool/$node" "$DIR/dev/$node"
    # Fake GPUs: character devices like /dev/nvidiaK (major 195), numbered across the nodes
    # as in gres.conf. Needs CAP_MKNOD (in Docker's default capability set).
    for ((i = 0; i < GPUS; i++)); do
      k=$(((n - 1) * GPUS + i))
      f="$DIR/dev/$node/nvidia$k"
      [ -c "$f" ] || mknod -m 666 "$f" c 195 "$k" || die "mknod $f failed (need CAP_MKNOD)"
    done
    exec slurmd -D -f "$SLURM_CONF" -N "$node"
    ;;
  slurmdbd)
    # slurmdbd.conf sits next to slurm.conf (SLURM_CONF's directory), mode 600.
    /usr/local/sbin/slurm-rl-accounting-db start /var/lib/slurm-rl-db 3306 \
      "$DIR/log/mariadb.log"
    exec slurmdbd -D
    ;;
  accounts)
    for _ in $(seq 600); do
      sacctmgr -n -P show cluster format=Cluster >/dev/null 2>&1 && break
      sleep 0.2
    done
    while IFS= read -r line; do
      case "$line" in ''|'#'*) continue ;; esac
      eval "sacctmgr -i $line" >/dev/null || die "sacctmgr -i $line failed"
    done <"$DIR/etc/accounts.sacctmgr"
    ;;
  run)
    [ $# -gt 0 ] || die "run needs a command"
    exec "$@"
    ;;
  *)
    die "usage: node-entrypoint.sh slurmctld | slurmd NODE | slurmdbd | accounts | run CMD..."
    ;;
esac
