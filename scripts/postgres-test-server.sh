#!/usr/bin/env bash
# A PostgreSQL server for the Postgres sink's tests: Debian's `postgresql`
# package, a cluster of its own under /tmp, listening on
# 127.0.0.1 only, with prepared transactions on (the sink's two-phase
# commit needs `max_prepared_transactions` > 0).
#
#   eval "$(scripts/postgres-test-server.sh start)"   # installs if needed, starts, exports the URL
#   cargo test --features postgres --test postgres_sink
#   scripts/postgres-test-server.sh stop
#
# It exports STREAMWORK_POSTGRES_URL (user `streamwork`, database
# `streamwork`, trust authentication on 127.0.0.1). Set POSTGRES_PORT to
# use another port than 5433. A second cluster on the next port runs with
# prepared transactions off, for the test of the sink's refusal of such a
# server: STREAMWORK_POSTGRES_NO_PREPARED_URL.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_PORT="${POSTGRES_PORT:-5433}"

SUDO=""
if [ "$(id -u)" != 0 ] && command -v sudo >/dev/null; then SUDO="sudo"; fi

bin() {
    ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1
}

install() {
    if [ -z "$(bin)" ]; then
        $SUDO apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq postgresql >/dev/null
    fi
}

# initdb and postgres refuse to run as root: as root, run them as `postgres`.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

listening() {
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

# The cluster on port $1: its directory outside the checkout (the server
# runs as `postgres` when started by root, and may not be able to reach a
# directory under it).
cluster() {
    PORT="$1"
    DIR="${POSTGRES_DIR:-/tmp/streamwork-postgres}-$PORT"
    DATA="$DIR/data"
}

# Starts the cluster on port $1 with max_prepared_transactions = $2.
start_cluster() {
    cluster "$1"
    local prepared="$2"
    local pg
    pg="$(bin)"
    mkdir -p "$DIR"
    if [ "$(id -u)" = 0 ]; then chown postgres "$DIR"; fi
    if [ ! -f "$DATA/PG_VERSION" ]; then
        as_owner "$pg/initdb" -D "$DATA" -U streamwork --auth=trust >"$DIR/initdb.log" 2>&1 \
            || { cat "$DIR/initdb.log" >&2; exit 1; }
    fi
    if ! listening; then
        as_owner "$pg/pg_ctl" -D "$DATA" -l "$DIR/server.log" -w -t 60 start \
            -o "-h 127.0.0.1 -p $PORT -k $DIR -c max_prepared_transactions=$prepared -c fsync=off" >&2 \
            || { cat "$DIR/server.log" >&2; exit 1; }
    fi
    if ! "$pg/psql" -h 127.0.0.1 -p "$PORT" -U streamwork -d postgres -tAc \
        "SELECT 1 FROM pg_database WHERE datname = 'streamwork'" | grep -q 1; then
        "$pg/createdb" -h 127.0.0.1 -p "$PORT" -U streamwork streamwork >&2
    fi
}

start() {
    install
    start_cluster "$BASE_PORT" 64
    start_cluster "$((BASE_PORT + 1))" 0
    echo "export STREAMWORK_POSTGRES_URL=postgresql://streamwork@127.0.0.1:$BASE_PORT/streamwork"
    echo "export STREAMWORK_POSTGRES_NO_PREPARED_URL=postgresql://streamwork@127.0.0.1:$((BASE_PORT + 1))/streamwork"
}

stop() {
    local pg port
    pg="$(bin)"
    for port in "$BASE_PORT" "$((BASE_PORT + 1))"; do
        cluster "$port"
        if [ -n "$pg" ] && [ -f "$DATA/postmaster.pid" ]; then
            as_owner "$pg/pg_ctl" -D "$DATA" -m fast stop >&2 || true
        fi
    done
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
