#!/usr/bin/env bash
# An S3-compatible server for the object-storage checkpoint tests: moto's
# server mode (PyPI), listening on 127.0.0.1 only, storing in memory.
#
#   eval "$(scripts/s3-test-server.sh start)"   # installs if needed, starts, exports the endpoint
#   cargo test --features s3 --test object_store_checkpoints
#   scripts/s3-test-server.sh stop
#
# It creates the bucket `streamwork-tests` and exports STREAMWORK_S3_ENDPOINT,
# STREAMWORK_S3_BUCKET and the AWS_* variables object_store's
# S3 client reads (any credentials do for moto). Set S3_PORT to use another
# port than 9000.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${S3_PORT:-9000}"
DIR="target/moto"
PIDFILE="$DIR/server.pid"

install() {
    if [ ! -d "$DIR/pkg/moto" ]; then
        mkdir -p "$DIR"
        python3 -m pip install --quiet --disable-pip-version-check --target "$DIR/pkg" "moto[server]==5.2.5" >&2
    fi
}

listening() {
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

start() {
    install
    if ! listening; then
        PYTHONPATH="$DIR/pkg" nohup python3 -m moto.server -H 127.0.0.1 -p "$PORT" \
            >"$DIR/server.log" 2>&1 &
        echo $! >"$PIDFILE"
        for _ in $(seq 1 200); do
            listening && break
            sleep 0.1
        done
        if ! listening; then
            echo "moto did not start; see $DIR/server.log" >&2
            exit 1
        fi
    fi
    # The tests' bucket (creating one that exists is not an error to moto).
    python3 -c "import urllib.request; urllib.request.urlopen(urllib.request.Request('http://127.0.0.1:$PORT/streamwork-tests', method='PUT'))" >/dev/null
    echo "export STREAMWORK_S3_ENDPOINT=http://127.0.0.1:$PORT STREAMWORK_S3_BUCKET=streamwork-tests AWS_ENDPOINT_URL=http://127.0.0.1:$PORT"
    echo "export AWS_ACCESS_KEY_ID=streamwork AWS_SECRET_ACCESS_KEY=streamwork AWS_REGION=us-east-1"
}

stop() {
    if [ -f "$PIDFILE" ]; then
        kill "$(cat "$PIDFILE")" 2>/dev/null || true
        rm -f "$PIDFILE"
    fi
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
