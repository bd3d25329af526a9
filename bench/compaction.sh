#!/usr/bin/env bash
# The log cleaner: its throughput (MB/s of log cleaned in one pass over a dirty
# partition) and the produce latency of a compacted topic with the cleaner running
# beside the same load with it off (--log-cleaner-enable false).
# Usage: bench/compaction.sh [TERN_BINARY]   (bounded: fixed counts, 60-120 s each)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${1:-$ROOT/target/release/tern}
LOAD=bench/target/release/tern-bench
[ -x "$LOAD" ] || (cd bench && cargo build --release --quiet)
PORT=${BENCH_COMPACT_PORT:-19970}
FILL=${BENCH_COMPACT_FILL:-200000}   # 1 KiB records, 2,000 keys: ~200 MB to clean
WORK=$(mktemp -d /tmp/tern-compact.XXXXXX)
BROKER=
stop_broker() { [ -n "$BROKER" ] && kill "$BROKER" 2>/dev/null && wait "$BROKER" 2>/dev/null; BROKER=; }
trap 'stop_broker; rm -rf "$WORK"' EXIT

start_broker() { # extra serve flags...
  rm -rf "$WORK/data"
  "$BIN" serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --metrics 127.0.0.1:0 --http 127.0.0.1:0 \
    --log-cleaner-backoff-ms 200 "$@" >"$WORK/broker.log" 2>&1 &
  BROKER=$!
  for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
}

# The log line of every pass: bytes of log cleaned and elapsed ms, summed.
cleaned() {
  grep 'log cleaner pass' "$WORK/broker.log" | sed -E 's/.*cleaned_bytes=([0-9]+).*elapsed_ms=([0-9]+).*/\1 \2/' |
    awk '{b += $1; ms += $2; n += 1} END {printf "%d passes, %.1f MB of log cleaned in %.2f s: %.1f MB/s\n", n, b / 1e6, ms / 1000, (ms > 0 ? b / 1e3 / ms : 0)}'
}

echo "== log cleaner throughput (1 KiB records over 2,000 keys, 1 partition, 64 MiB segments)"
start_broker
# Never due while filling (a ratio is at most 1), then due at once.
"$BIN" topic create -b 127.0.0.1:$PORT fill --partitions 1 --config cleanup.policy=compact \
  --config segment.bytes=67108864 --config min.cleanable.dirty.ratio=1 >/dev/null
$LOAD --mode produce --brokers 127.0.0.1:$PORT --topic fill --partitions 1 --size 1024 --keys 2000 \
  --count "$FILL" --acks 1 --timeout-s 120 >/dev/null
sleep 2 # one flush interval, so the sealed segments are cleanable
"$BIN" topic alter-config -b 127.0.0.1:$PORT fill --set min.cleanable.dirty.ratio=0.01 >/dev/null
for _ in $(seq 1 120); do grep -q 'log cleaner pass' "$WORK/broker.log" && break; sleep 0.5; done
echo "cleaner: $(cleaned)"
stop_broker

echo "== produce latency of a compacted topic (1 KiB, 2,000 keys, 5,000/s, 1 MiB segments, acks=all)"
for cleaner in false true; do
  start_broker --log-cleaner-enable "$cleaner"
  "$BIN" topic create -b 127.0.0.1:$PORT compacted --partitions 1 --config cleanup.policy=compact \
    --config segment.bytes=1048576 --config min.cleanable.dirty.ratio=0.1 >/dev/null
  printf 'cleaner=%-5s %s\n' "$cleaner" "$($LOAD --mode latency --brokers 127.0.0.1:$PORT --topic compacted \
    --partitions 1 --keys 2000 --size 1024 --rate 5000 --count 100000 --acks all --timeout-s 90)"
  [ "$cleaner" = true ] && echo "  while it ran: $(cleaned)"
  stop_broker
done
