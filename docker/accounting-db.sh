#!/usr/bin/env bash
# The test cluster's MariaDB, which slurmdbd stores accounting in (docker/cluster on both
# engines; the docker engine runs it in the dbd container, the native launcher on the host).
#
#   accounting-db.sh init DATADIR              an empty server in DATADIR with one account,
#                                              slurm@127.0.0.1 (password slurm), that may do
#                                              anything in slurm_acct_db (slurmdbd creates it)
#   accounting-db.sh start DATADIR PORT LOG    mariadbd on 127.0.0.1:PORT, detached; returns
#                                              once it answers (at most 30 s)
#   accounting-db.sh stop DATADIR              stop it (SIGTERM, then wait)
#
# Nothing is read from /etc/mysql (--no-defaults) and nothing is written outside DATADIR and
# LOG, so it never meets a site's own MariaDB. It listens on the loopback only, with settings
# for speed rather than durability (a test cluster's accounting starts empty every time).
set -euo pipefail
umask 022

die() { printf 'accounting-db: error: %s\n' "$*" >&2; exit 1; }

# Written into the grant tables during mariadb-install-db's bootstrap (no server runs yet, so
# no CREATE USER): the account slurmdbd logs in with, allowed everything in its database only.
PRIVS="Select Insert Update Delete Create Drop References Index Alter Create_tmp_table
Lock_tables Create_view Show_view Create_routine Alter_routine Execute Event Trigger
Delete_history"
SQL="INSERT INTO mysql.global_priv (Host, User, Priv) VALUES ('127.0.0.1', 'slurm',
  JSON_OBJECT('access', 0, 'plugin', 'mysql_native_password',
              'authentication_string', PASSWORD('slurm')));
INSERT INTO mysql.db SET Host = '127.0.0.1', Db = 'slurm_acct_db', User = 'slurm'$(
  for p in $PRIVS; do printf ", %s_priv = 'Y'" "$p"; done);"

# Durability off, memory small: this is a scratch database for a test cluster.
FAST=(--skip-log-bin --skip-name-resolve --innodb-buffer-pool-size=32M
      --innodb-log-file-size=16M --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0
      --innodb-flush-method=nosync --performance-schema=OFF --skip-innodb-adaptive-hash-index)

cmd=${1:-}
shift || true
case "$cmd" in
  init)
    [ $# -eq 1 ] || die "usage: accounting-db.sh init DATADIR"
    d=$1
    rm -rf "$d"
    mkdir -p "$d"
    printf '%s\n' "$SQL" >"$d.sql"
    out=$(mariadb-install-db --no-defaults --datadir="$d" --user=root --skip-test-db \
            --auth-root-authentication-method=socket --skip-name-resolve \
            --extra-file="$d.sql" 2>&1) || {
      rm -f "$d.sql"
      die "mariadb-install-db failed: $(printf '%s\n' "$out" | tail -n 5)"
    }
    rm -f "$d.sql"
    ;;
  start)
    [ $# -eq 3 ] || die "usage: accounting-db.sh start DATADIR PORT LOG"
    d=$1 port=$2 log=$3
    [ -d "$d/mysql" ] || die "$d holds no database (accounting-db.sh init $d)"
    rm -f "$d/mariadbd.pid" "$d/mariadbd.sock"
    setsid mariadbd --no-defaults --datadir="$d" --user=root --bind-address=127.0.0.1 \
      --port="$port" --socket="$d/mariadbd.sock" --pid-file="$d/mariadbd.pid" \
      --log-error="$log" "${FAST[@]}" </dev/null >/dev/null 2>&1 9>&- &
    pid=$!
    deadline=$((SECONDS + 30))
    until mariadb-admin --no-defaults --socket="$d/mariadbd.sock" --user=root \
            --connect-timeout=1 ping >/dev/null 2>&1; do
      kill -0 "$pid" 2>/dev/null || die "mariadbd exited: $(tail -n 5 "$log" 2>/dev/null)"
      [ $SECONDS -lt $deadline ] || die "mariadbd does not answer within 30 s ($log)"
      sleep 0.05
    done
    ;;
  stop)
    [ $# -eq 1 ] || die "usage: accounting-db.sh stop DATADIR"
    d=$1
    pid=$(tr -dc '0-9' <"$d/mariadbd.pid" 2>/dev/null || true)
    [ -n "$pid" ] || exit 0
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = mariadbd ] || exit 0
    kill -TERM "$pid" 2>/dev/null || exit 0
    for _ in $(seq 100); do
      [ -d "/proc/$pid" ] || exit 0
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
    ;;
  *)
    die "usage: accounting-db.sh init DATADIR | start DATADIR PORT LOG | stop DATADIR"
    ;;
esac
