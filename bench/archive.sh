#!/usr/bin/env bash
# The archive: its throughput (MB/s of log archived as Parquet to a directory, from the
# exporter's own "archived" log lines: log bytes over the time the exports took) and the
# produce latency of an archived topic whose data expires and is archived continuously,
# beside the same load on a topic that does not archive.
# Usage: bench/archive.sh [TERN_BINARY]   (bounded: fixed counts, 60-120 s each)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BIN=${1:-$ROOT/target/release/tern}
LOAD=bench/target/release/tern-bench
[ -x "$LOAD" ] || (cd bench && cargo build --release --quiet)
PORT=${BENCH_ARCHIVE_PORT:-19960}
FILL=${BENCH_ARCHIVE_FILL:-200000}   # 1 KiB records: ~210 MB of log to archive
WORK=$(mktemp -d /tmp/tern-archive.XXXXXX)
BROKER=
stop_broker() { [ -n "$BROKER" ] && kill "$BROKER" 2>/dev/null && wait "$BROKER" 2>/dev/null; BROKER=; }
trap 'stop_broker; rm -rf "$WORK"' EXIT

start_broker() { # extra serve flags...
  rm -rf "$WORK/data" "$WORK/archive"
  "$BIN" serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --metrics 127.0.0.1:0 --http 127.0.0.1:0 \
    --archive-dir "$WORK/archive" --archive-interval-ms 200 --log-retention-check-interval-ms 200 \
    "$@" >"$WORK/broker.log" 2>&1 &
  BROKER=$!
  for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done
}

archived() {
  (grep ' archived ' "$WORK/broker.log" || true) | sed -E 's/.*elapsed_ms=([0-9]+).*records=([0-9]+) log_bytes=([0-9]+).*/\1 \2 \3/' |
    awk '{ms += $1; r += $2; b += $3; n += 1} END {printf "%d exports, %d records, %.1f MB of log archived in %.2f s: %.1f MB/s", n, r, b / 1e6, ms / 1000, (ms > 0 ? b / 1e3 / ms : 0)}'
}

echo "== archive throughput (1 KiB random records, 1 partition, 16 MiB segments, to a directory)"
start_broker
"$BIN" topic create -b 127.0.0.1:$PORT fill --partitions 1 --config segment.bytes=16777216 \
  --config archive.enable=true >/dev/null
$LOAD --mode produce --brokers 127.0.0.1:$PORT --topic fill --partitions 1 --size 1024 \
  --count "$FILL" --acks 1 --random-payload --timeout-s 120 >/dev/null
# Everything sealed expires at once; the exporter takes it all.
"$BIN" topic alter-config -b 127.0.0.1:$PORT fill --set retention.ms=1 >/dev/null
sealed=$(( FILL * 1090 / 16777216 * 16777216 / 1090 ))
for _ in $(seq 1 240); do
  n=$( (grep ' archived ' "$WORK/broker.log" || true) | sed -E 's/.*next_offset=([0-9]+).*/\1/' | tail -1)
  [ -n "$n" ] && [ "$n" -ge "$(( sealed * 9 / 10 ))" ] && break
  sleep 0.5
done
echo "archive: $(archived)"
du -sb "$WORK/archive" | awk '{printf "  parquet on disk: %.1f MB\n", $1 / 1e6}'
stop_broker

echo "== produce latency with the archiver running (1 KiB, 5,000/s, 1 MiB segments expiring after 2 s, acks=all)"
for enable in false true; do
  start_broker
  "$BIN" topic create -b 127.0.0.1:$PORT lat --partitions 1 --config segment.bytes=1048576 \
    --config retention.ms=2000 --config archive.enable=$enable >/dev/null
  printf 'archive.enable=%-5s %s\n' "$enable" "$($LOAD --mode latency --brokers 127.0.0.1:$PORT --topic lat \
    --partitions 1 --size 1024 --rate 5000 --count 100000 --acks all --timeout-s 90)"
  [ "$enable" = true ] && echo "  while it ran: $(archived)"
  stop_broker
done
