#!/usr/bin/env bash
# Produce latency across segment rolls: one partition with 1 MiB segments, so a
# 1 KiB producer at 5,000 msgs/s rolls about five times a second, beside the same
# load on a topic that never rolls. A roll that fsyncs under the partition's lock
# shows up here as a produce p99 above the no-roll topic's.
# Usage: bench/roll.sh [TERN_BINARY]   (bounded: 50,000 messages per run, 60 s)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${1:-$ROOT/target/release/tern}
LOAD=bench/target/release/tern-bench
[ -x "$LOAD" ] || (cd bench && cargo build --release --quiet)
PORT=${BENCH_ROLL_PORT:-19980}
WORK=$(mktemp -d /tmp/tern-roll.XXXXXX)
"$BIN" serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --metrics 127.0.0.1:0 \
  --http 127.0.0.1:0 >"$WORK/broker.log" 2>&1 &
BROKER=$!
trap 'kill $BROKER 2>/dev/null; wait $BROKER 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
"$BIN" topic create -b 127.0.0.1:$PORT rolls --partitions 1 --config segment.bytes=1048576 >/dev/null
"$BIN" topic create -b 127.0.0.1:$PORT steady --partitions 1 >/dev/null
echo "== produce latency across segment rolls ($(basename "$BIN"); 1 KiB, 5,000/s, 1 partition)"
for acks in 1 all; do
  for topic in steady rolls; do
    printf '%-7s %s\n' "$topic" "$($LOAD --mode latency --brokers 127.0.0.1:$PORT --topic $topic --partitions 1 \
      --size 1024 --rate 5000 --count 50000 --acks $acks --timeout-s 60)"
  done
done
echo "segments of 'rolls': $(ls "$WORK/data" | grep -c . >/dev/null; ls "$WORK"/data/rolls-0/*.log | wc -l)"
