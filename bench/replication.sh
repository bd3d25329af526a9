#!/usr/bin/env bash
# Replication benchmark (part of `make bench`): etcd and three brokers on this machine,
# a topic of 6 partitions with replication factor 3 and min.insync.replicas=2, driven
# by librdkafka (bench/ crate) with acks=all and 1 KiB messages: throughput, produce
# latency at a fixed 10,000 msgs/s (failover and catch-up: bench/failover.py). Bounded
# by message counts and timeouts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TERN="${1:-$ROOT/target/release/tern}"
LOAD=bench/target/release/tern-bench
[ -x "$LOAD" ] || (cd bench && cargo build --release --quiet)
WORK=$(mktemp -d /tmp/tern-repl-bench.XXXXXX)
COUNT=${BENCH_REPL_COUNT:-500000}
# Kafka's default policy (acknowledged in every in-sync replica's page cache, fsynced on
# the flush interval), or fsync of every write on every in-sync replica before it is
# acknowledged: BENCH_REPL_FLUSH_MESSAGES=1 (the topic config flush.messages).
FLUSH_MESSAGES=${BENCH_REPL_FLUSH_MESSAGES:-}
source bench/etcd_cluster.sh
# Runtime threads per broker (--worker-threads): three brokers share this machine's cores.
WORKER_THREADS=${BENCH_WORKER_THREADS:-}
for n in 1 2 3; do start_broker "$n" ${WORKER_THREADS:+--worker-threads $WORKER_THREADS} --http "127.0.0.1:$(port)"; done
METRICS_URLS=(); for n in 1 2 3; do METRICS_URLS+=("http://127.0.0.1:${MPORT[$n]}/metrics"); done
BOOT="127.0.0.1:${KPORT[1]},127.0.0.1:${KPORT[2]},127.0.0.1:${KPORT[3]}"
sleep 2
for t in r1k rlat; do
  "$TERN" topic create "$t" --partitions 6 --replication-factor 3 --config min.insync.replicas=2 \
    ${FLUSH_MESSAGES:+--config flush.messages=$FLUSH_MESSAGES} -b "127.0.0.1:${KPORT[1]}" >/dev/null
done
# Partitions of topic $1 with three in-sync replicas, as broker 1 (never restarted) says.
in_sync() { kcat -b "127.0.0.1:${KPORT[1]}" -L -t "$1" 2>/dev/null | grep -c "isrs: [0-9]*,[0-9]*,[0-9]*" || true; }
for _ in $(seq 1 100); do [ "$(in_sync r1k)" = 6 ] && [ "$(in_sync rlat)" = 6 ] && break; sleep 0.2; done
echo "== replication: 3 brokers, RF=3, min.insync.replicas=2, flush.messages=${FLUSH_MESSAGES:-default}, worker threads ${WORKER_THREADS:-one per core} (brokers and client on this machine; $(nproc) cores)"
# The three brokers' CPU (utime + stime) over the throughput run: steadier than msgs/s
# on a machine where the client and the brokers share the cores.
brokers_cpu_ticks() {
  local total=0 pid
  for pid in "${BPID[1]}" "${BPID[2]}" "${BPID[3]}"; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}
HZ=$(getconf CLK_TCK)
before=$(brokers_cpu_ticks)
out=$($LOAD --mode produce --brokers "$BOOT" --topic r1k --partitions 6 --size 1024 --count "$COUNT" --acks all --timeout-s 120)
after=$(brokers_cpu_ticks)
gb=$(echo "$COUNT * 1024 / 1000000000" | bc -l)
printf '%s  brokers_cpu=%.2fs (%.3f CPU-s/GB, 3 brokers)\n' "$out" \
  "$(echo "($after - $before) / $HZ" | bc -l)" "$(echo "($after - $before) / $HZ / $gb" | bc -l)"
python3 bench/phases.py --save "$WORK/phases.json" "${METRICS_URLS[@]}"
$LOAD --mode latency --brokers "$BOOT" --topic rlat --partitions 6 --size 1024 --rate 10000 --count 100000 --acks all --timeout-s 60
python3 bench/phases.py --since "$WORK/phases.json" --api Produce "${METRICS_URLS[@]}"
