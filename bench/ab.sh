#!/usr/bin/env bash
# A/B benchmark of two broker builds in one session (`make bench-ab A=... B=...`): the
# single-broker (bench/single.sh) and three-broker (bench/replication.sh) benchmarks,
# alternating A and B for ROUNDS rounds, so that drift of the machine (page cache,
# thermal, other load) spreads over both instead of favouring the one run last.
set -euo pipefail
cd "$(dirname "$0")/.."
A=${1:?usage: bench/ab.sh BINARY_A BINARY_B [ROUNDS]}
B=${2:?usage: bench/ab.sh BINARY_A BINARY_B [ROUNDS]}
ROUNDS=${3:-2}
(cd bench && cargo build --release --quiet)
for round in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin=$A; [ "$side" = B ] && bin=$B
    echo "#### round $round, $side: $bin"
    bash bench/single.sh "$bin"
    bash bench/replication.sh "$bin"
  done
done
