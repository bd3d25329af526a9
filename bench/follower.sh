#!/usr/bin/env bash
# What a follower's fetching costs its leader, against a consumer reading the same bytes
# (part of `make bench`; issue 27: "a follower fetching from a leader costs the leader no
# more than a consumer does"). etcd and two brokers on this machine, one partition with
# replication factor 2. The follower is stopped, COUNT x 1 KiB are produced (acks=1),
# the follower is started again and the leader's CPU is counted until the follower has
# caught up; then a consumer reads as many messages from the leader and its CPU is
# counted again. Bounded by message counts and timeouts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TERN="${1:-$ROOT/target/release/tern}"
LOAD=bench/target/release/tern-bench
[ -x "$LOAD" ] || (cd bench && cargo build --release --quiet)
WORK=$(mktemp -d /tmp/tern-follower-bench.XXXXXX)
COUNT=${BENCH_FOLLOWER_COUNT:-500000}
source bench/etcd_cluster.sh
for n in 1 2; do start_broker "$n" --http-enable false; done
sleep 2
"$TERN" topic create fcost --partitions 1 --replication-factor 2 -b "127.0.0.1:${KPORT[1]}" >/dev/null
metadata() { kcat -b "127.0.0.1:${KPORT[$1]}" -L -t fcost 2>/dev/null | grep "partition 0," || true; }
for _ in $(seq 1 100); do metadata 1 | grep -q "isrs: [0-9]*,[0-9]*" && break; sleep 0.2; done
LEADER=$(metadata 1 | sed -n 's/.*leader \([0-9]*\),.*/\1/p')
FOLLOWER=$((3 - LEADER))
ticks() { awk '{print $14 + $15}' "/proc/${BPID[$LEADER]}/stat"; }
HZ=$(getconf CLK_TCK)
per_gb() { awk -v t="$1" -v hz="$HZ" -v n="$COUNT" 'BEGIN {printf "%.3f", t / hz / (n * 1024 / 1e9)}'; }
echo "== follower against consumer: what reading $COUNT x 1 KiB costs the leader (broker $LEADER; $(nproc) cores)"
kill -TERM "${BPID[$FOLLOWER]}"; wait "${BPID[$FOLLOWER]}" 2>/dev/null || true
# The consumer reads a topic of its own, made while the leader is the only broker (so it
# is the leader's), with the same bytes: each reader then maps its segments first and
# pays the same page faults (the first reader of a segment's map pays them).
"$TERN" topic create ccost --partitions 1 --replication-factor 1 -b "127.0.0.1:${KPORT[$LEADER]}" >/dev/null
for topic in fcost ccost; do
  $LOAD --mode produce --brokers "127.0.0.1:${KPORT[$LEADER]}" --topic "$topic" --partitions 1 --size 1024 \
    --count "$COUNT" --acks 1 --timeout-s 120 >/dev/null
done
sleep 1
# Caught up once the follower's replica fetchers have appended every byte the producer
# appended on the leader (both counters are record-batch bytes; read from each broker's
# /metrics: the leader's once, the follower's while it catches up, costing the leader nothing).
counter() { curl -s "127.0.0.1:${MPORT[$1]}/metrics" | awk -v m="$2" 'index($1, m) == 1 {s += $2} END {printf "%d", s}'; }
produced=$(counter "$LEADER" 'tern_topic_bytes_in_total{topic="fcost"}')
caught_up() { [ "$(counter "$FOLLOWER" tern_replication_bytes_in_total)" -ge "$produced" ]; }
before=$(ticks); started=$(date +%s.%N)
start_broker "$FOLLOWER" --http-enable false
for _ in $(seq 1 1200); do caught_up && break; sleep 0.05; done
after=$(ticks); took=$(echo "$(date +%s.%N) - $started" | bc -l)
printf 'follower catch-up: %.1f s, leader CPU %.2f s = %s CPU-s/GB (the follower start-up included)\n' \
  "$took" "$(echo "($after - $before) / $HZ" | bc -l)" "$(per_gb $((after - before)))"
before=$(ticks)
$LOAD --mode consume --brokers "127.0.0.1:${KPORT[$LEADER]}" --topic ccost --partitions 1 --count "$COUNT" --timeout-s 120
after=$(ticks)
printf 'consumer: leader CPU %.2f s = %s CPU-s/GB\n' "$(echo "($after - $before) / $HZ" | bc -l)" "$(per_gb $((after - before)))"
