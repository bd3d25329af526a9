#!/usr/bin/env bash
# Single-broker benchmark (part of `make bench`): starts the broker binary given (default
# target/release/tern) on a scratch data dir and drives it with librdkafka (bench/ crate)
# and the HTTP API. Prints throughput, latency, broker CPU per GB and RssAnon. Every run
# is bounded by message count and by --timeout-s. Taking the binary lets an A/B run
# compare two builds in one session (bench/ab.sh). The 1 KiB acks=all produce and its
# consume run BENCH_FLOOR_REPS (3) times and are given as multiples of the kernel's own
# cost (bench/src/bin/floor.rs) when TERN_FLOOR_JSON names its output (bench/run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TERN="${1:-$ROOT/target/release/tern}"
need=(); command -v cmake >/dev/null || need+=(cmake); command -v bc >/dev/null || need+=(bc)
if ((${#need[@]})); then apt-get update -qq && apt-get install -y -qq "${need[@]}"; fi
LOAD=bench/target/release/tern-bench
[ -x "$LOAD" ] || (cd bench && cargo build --release --quiet)
PORT=${BENCH_PORT:-19990}
HTTP_PORT=${BENCH_HTTP_PORT:-19991}
METRICS_PORT=${BENCH_METRICS_PORT:-19992}
WORK=$(mktemp -d /tmp/tern-bench.XXXXXX)
COUNT_1K=${BENCH_COUNT_1K:-1000000}
COUNT_100=${BENCH_COUNT_100:-3000000}
FLOOR_REPS=${BENCH_FLOOR_REPS:-3}

"$TERN" serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --num-partitions 8 \
  --http 127.0.0.1:$HTTP_PORT --metrics 127.0.0.1:$METRICS_PORT >"$WORK/broker.log" 2>&1 &
BROKER=$!
trap 'kill $BROKER 2>/dev/null; wait $BROKER 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done

cpu_ticks() { awk '{print $14 + $15}' /proc/$BROKER/stat; }
rss_anon_kb() { awk '/RssAnon/ {print $2}' /proc/$BROKER/status; }
HZ=$(getconf CLK_TCK)

# "pid ticks" (utime + stime) of every kworker and jbd2 thread: writeback and the ext4
# journal run there, on no process's account, but for the broker's writes.
kworker_ticks() { cat /proc/[0-9]*/stat 2>/dev/null | awk '$2 ~ /^\((kworker|jbd2)/ {print $1, $14 + $15}'; }
# Ticks between two kworker_ticks files; a thread that is new (or a reused pid) counts whole.
kworker_delta() {
  awk 'FILENAME == ARGV[1] {b[$1] = $2; next} {d = $2 - ($1 in b ? b[$1] : 0); s += d < 0 ? $2 : d} END {print s + 0}' "$1" "$2"
}

# Runs a load run ("$@") with its output into OUT, and the CPU seconds that it cost the
# broker and the kernel workers into BROKER_S and KWORKER_S.
measured() {
  local before after
  kworker_ticks >"$WORK/kw.before"
  before=$(cpu_ticks)
  OUT=$("$@")
  after=$(cpu_ticks)
  kworker_ticks >"$WORK/kw.after"
  BROKER_S=$(awk -v t=$((after - before)) -v hz="$HZ" 'BEGIN {print t / hz}')
  KWORKER_S=$(awk -v t="$(kworker_delta "$WORK/kw.before" "$WORK/kw.after")" -v hz="$HZ" 'BEGIN {print t / hz}')
}

# PER_GB: "total broker kworker" CPU-s/GB of the last measured run that moved $1 bytes.
per_gb() {
  PER_GB=$(awk -v b="$BROKER_S" -v k="$KWORKER_S" -v bytes="$(($1))" \
    'BEGIN {gb = bytes / 1e9; printf "%.4f %.4f %.4f", (b + k) / gb, b / gb, k / gb}')
}

run_produce() { # topic size count acks
  measured $LOAD --mode produce --brokers 127.0.0.1:$PORT --topic "$1" --size "$2" --count "$3" --acks "$4" --timeout-s 120
  per_gb "$2 * $3"
  printf '%s  broker_cpu=%.2fs (%.3f CPU-s/GB) kworker_cpu=%.2fs  rss_anon=%dMB\n' "$OUT" \
    "$BROKER_S" "$(echo "$PER_GB" | cut -d' ' -f2)" "$KWORKER_S" "$(( $(rss_anon_kb) / 1024 ))"
}

run_consume() { # topic size count
  measured $LOAD --mode consume --brokers 127.0.0.1:$PORT --topic "$1" --count "$3" --timeout-s 120
  per_gb "$2 * $3"
  printf '%s  broker_cpu=%.2fs (%.3f CPU-s/GB) kworker_cpu=%.2fs\n' "$OUT" \
    "$BROKER_S" "$(echo "$PER_GB" | cut -d' ' -f2)" "$KWORKER_S"
}

# A figure of the floor probe's JSON (one key a line), or nothing without one.
floor_value() {
  [ -r "${TERN_FLOOR_JSON:-}" ] && sed -n "s/^ *\"$1\": *\([0-9.]*\).*/\1/p" "$TERN_FLOOR_JSON"
  return 0
}

# Reps of PER_GB lines on stdin: the rep of median total (its parts add up), the spread
# of the totals, and their multiple of the floor figure named $2.
versus_floor() { # label floor-key
  sort -g | awk -v label="$1" -v key="$2" -v floor="$(floor_value "$2")" '
    {t[NR] = $1; b[NR] = $2; k[NR] = $3}
    END {
      m = int(NR / 2) + 1
      line = sprintf("%s: %.3f CPU-s/GB (broker %.3f + kworker %.3f), spread %.3f-%.3f over %d runs", label, t[m], b[m], k[m], t[1], t[NR], NR)
      if (floor > 0) line = line sprintf(", %.1fx the floor (%s %.3f), spread %.1f-%.1fx", t[m] / floor, key, floor, t[1] / floor, t[NR] / floor)
      else line = line ", no floor (TERN_FLOOR_JSON: bench/run.sh runs bench/target/release/floor)"
      print line
    }'
}

# Create every topic up front (8 partitions, the broker default here) so that no
# consumer starts before its topic exists and waits for a metadata refresh.
for t in b1k-all b1k-one b100-all b100-one lat-all lat-1; do
  echo | kcat -b 127.0.0.1:$PORT -P -t $t -p 0 2>/dev/null || true
done

echo "== tern bench (broker and client on this machine; $(nproc) cores)"
# 1 KiB acks=all, FLOOR_REPS times into the same topic: median and spread of the broker's
# CPU per GB, as a multiple of the write floor.
for _ in $(seq 1 "$FLOOR_REPS"); do
  run_produce b1k-all 1024 "$COUNT_1K" all
  echo "$PER_GB" >>"$WORK/produce.reps"
done
versus_floor "produce 1KiB acks=all vs floor" write_cpu_s_per_gb <"$WORK/produce.reps"
run_produce b1k-one 1024 "$COUNT_1K" 1
run_produce b100-all 100 "$COUNT_100" all
run_produce b100-one 100 "$COUNT_100" 1
# Its first COUNT_1K messages read back FLOOR_REPS times, against the sendfile floor.
for _ in $(seq 1 "$FLOOR_REPS"); do
  run_consume b1k-all 1024 "$COUNT_1K"
  echo "$PER_GB" >>"$WORK/consume.reps"
done
versus_floor "consume 1KiB vs floor" sendfile_cpu_s_per_gb <"$WORK/consume.reps"
$LOAD --mode consume --brokers 127.0.0.1:$PORT --topic b100-all --count "$COUNT_100" --timeout-s 120
# Produce latency at 10,000 msgs/s of 100 B, then where the broker's part of it went
# (bench/phases.py: queue, local and remote time of those Produce requests).
for acks in all 1; do
  python3 bench/phases.py --save "$WORK/phases.json" "http://127.0.0.1:$METRICS_PORT/metrics"
  printf '%s  rss_anon=%dMB\n' "$($LOAD --mode latency --brokers 127.0.0.1:$PORT --topic "lat-$acks" --size 100 --rate 10000 --count 100000 --acks "$acks" --timeout-s 60)" "$(( $(rss_anon_kb) / 1024 ))"
  python3 bench/phases.py --since "$WORK/phases.json" --api Produce "http://127.0.0.1:$METRICS_PORT/metrics"
done

# The HTTP API on the same broker: publish (each acknowledged as acks=all before its answer) and GET /message.
echo "== HTTP API (bench/http_bench.py: stdlib client, keep-alive connections)"
python3 "$(dirname "$0")/http_bench.py" --url "http://127.0.0.1:$HTTP_PORT" --messages 5000 --threads 8 --timeout 120

