#!/usr/bin/env bash
# Single-broker benchmark (part of `make bench`): starts the broker binary given (default
# target/release/tern) on a scratch data dir and drives it with librdkafka (bench/ crate)
# and the HTTP API. Prints throughput, latency, broker CPU per GB and RssAnon. Every run
# is bounded by message count and by --timeout-s. Taking the binary lets an A/B run
# compare two builds in one session (bench/ab.sh).
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
WORK=$(mktemp -d /tmp/tern-bench.XXXXXX)
COUNT_1K=${BENCH_COUNT_1K:-1000000}
COUNT_100=${BENCH_COUNT_100:-3000000}

"$TERN" serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --num-partitions 8 \
  --http 127.0.0.1:$HTTP_PORT >"$WORK/broker.log" 2>&1 &
BROKER=$!
trap 'kill $BROKER 2>/dev/null; wait $BROKER 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.1; done

cpu_ticks() { awk '{print $14 + $15}' /proc/$BROKER/stat; }
rss_anon_kb() { awk '/RssAnon/ {print $2}' /proc/$BROKER/status; }
HZ=$(getconf CLK_TCK)

run_produce() { # topic size count acks
  local before after
  before=$(cpu_ticks)
  out=$($LOAD --mode produce --brokers 127.0.0.1:$PORT --topic "$1" --size "$2" --count "$3" --acks "$4" --timeout-s 120)
  after=$(cpu_ticks)
  local gb
  gb=$(echo "$2 * $3 / 1000000000" | bc -l)
  printf '%s  broker_cpu=%.2fs (%.3f CPU-s/GB)  rss_anon=%dMB\n' "$out" \
    "$(echo "($after - $before) / $HZ" | bc -l)" "$(echo "($after - $before) / $HZ / $gb" | bc -l)" "$(( $(rss_anon_kb) / 1024 ))"
}

# Create every topic up front (8 partitions, the broker default here) so that no
# consumer starts before its topic exists and waits for a metadata refresh.
for t in b1k-all b1k-one b100-all b100-one lat lat1; do
  echo | kcat -b 127.0.0.1:$PORT -P -t $t -p 0 2>/dev/null || true
done

echo "== tern bench (broker and client on this machine; $(nproc) cores)"
run_produce b1k-all 1024 "$COUNT_1K" all
run_produce b1k-one 1024 "$COUNT_1K" 1
run_produce b100-all 100 "$COUNT_100" all
run_produce b100-one 100 "$COUNT_100" 1
$LOAD --mode consume --brokers 127.0.0.1:$PORT --topic b1k-all --count "$COUNT_1K" --timeout-s 120
$LOAD --mode consume --brokers 127.0.0.1:$PORT --topic b100-all --count "$COUNT_100" --timeout-s 120
printf '%s  rss_anon=%dMB\n' "$($LOAD --mode latency --brokers 127.0.0.1:$PORT --topic lat --size 100 --rate 10000 --count 100000 --acks all --timeout-s 60)" "$(( $(rss_anon_kb) / 1024 ))"
printf '%s  rss_anon=%dMB\n' "$($LOAD --mode latency --brokers 127.0.0.1:$PORT --topic lat1 --size 100 --rate 10000 --count 100000 --acks 1 --timeout-s 60)" "$(( $(rss_anon_kb) / 1024 ))"

# The HTTP API on the same broker: publish (each acknowledged as acks=all before its answer) and GET /message.
echo "== HTTP API (bench/http_bench.py: stdlib client, keep-alive connections)"
python3 "$(dirname "$0")/http_bench.py" --url "http://127.0.0.1:$HTTP_PORT" --messages 5000 --threads 8 --timeout 120

