#!/usr/bin/env bash
# `make bench`: every benchmark, each starting its own brokers on scratch directories and
# driving them with librdkafka (bench/ crate) or the HTTP API. Every run is bounded by
# message count and by timeouts. The binary is target/release/tern, or $TERN_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TERN="${TERN_BIN:-$ROOT/target/release/tern}"
need=(); command -v cmake >/dev/null || need+=(cmake); command -v bc >/dev/null || need+=(bc)
if ((${#need[@]})); then apt-get update -qq && apt-get install -y -qq "${need[@]}"; fi
(cd bench && cargo build --release --quiet)

# First the floor (bench/src/bin/floor.rs): the kernel's own CPU per GB for receiving
# bytes over loopback TCP, CRC32C, pwrite and fdatasync (write floor), and for
# sendfile-serving them (sendfile floor). Its medians go to TERN_FLOOR_JSON, against
# which bench/single.sh gives the broker's 1 KiB produce and consume CPU as multiples.
echo "== Floor: the kernel's own cost of the bytes a broker moves (bench/src/bin/floor.rs)"
TERN_FLOOR_JSON=$(mktemp /tmp/tern-floor.XXXXXX.json)
export TERN_FLOOR_JSON
trap 'rm -f "$TERN_FLOOR_JSON"' EXIT
bench/target/release/floor --gib 2 --reps 3 --json "$TERN_FLOOR_JSON"

bash bench/single.sh "$TERN"

# TLS (rustls) against plaintext: the broker's CPU per GB over each listener, same client.
bash bench/tls.sh "$TERN"

# The same through one broker of a three-broker cluster on etcd (forwarding to leaders).
echo "== HTTP API, three-broker cluster (bench/http_cluster_bench.py)"
PY=.venv/bin/python; [ -x "$PY" ] || PY=python3
TERN_BIN="$TERN" "$PY" bench/http_cluster_bench.py --messages 3000 --threads 8 --timeout 120

# Transactions: three brokers, RF=3, 500 x 1 KiB per transaction, beside the same load
# without transactions, and read_committed end-to-end latency (bench/txn_bench.py).
echo "== Transactions, three-broker cluster (bench/txn_bench.py)"
TERN_BIN="$TERN" "$PY" bench/txn_bench.py --transactions 200 --per-txn 500 --size 1024

# Group rebalance time: KIP-848 consumer groups against the classic protocol, 10 and 100
# members (bench/group_bench.py).
echo "== Group rebalance time, single broker (bench/group_bench.py)"
TERN_BIN="$TERN" "$PY" bench/group_bench.py --sizes 10,100 --timeout 120

# Share groups (KIP-932): records acknowledged per second by 1, 4 and 16 share consumers
# on one partition (bench/share_bench.py).
echo "== Share-group throughput, one partition, single broker (bench/share_bench.py)"
TERN_BIN="$TERN" "$PY" bench/share_bench.py --records 200000 --consumers 1,4,16

# Fairness: another client's produce p99 beside a flood, without and with a quota on the
# flooding client id (bench/quota_bench.py).
echo "== Quota fairness, single broker (bench/quota_bench.py)"
TERN_BIN="$TERN" "$PY" bench/quota_bench.py --rate 1000 --seconds 8

# Replication: three brokers, RF=3, acks=all (bench/replication.sh).
bash bench/replication.sh "$TERN"
BENCH_WORKER_THREADS=1 bash bench/replication.sh "$TERN"
BENCH_REPL_FLUSH_MESSAGES=1 bash bench/replication.sh "$TERN"

# What a follower's catch-up costs its leader, against a consumer reading the same bytes.
bash bench/follower.sh "$TERN"

# Failover (kill -9 and SIGTERM of a leader) and an emptied broker's catch-up (bench/failover.py).
TERN_BIN="$TERN" "$PY" bench/failover.py

# Produce latency while the partition rolls segments (bench/roll.sh).
bash bench/roll.sh "$TERN"

# The log cleaner: throughput and produce latency beside it (bench/compaction.sh).
bash bench/compaction.sh "$TERN"

# The Parquet archive: throughput and produce latency beside it (bench/archive.sh).
bash bench/archive.sh "$TERN"
