#!/usr/bin/env bash
# TLS against plaintext (part of `make bench`): one broker with a PLAINTEXT and an SSL
# listener (rustls; a throwaway self-signed certificate), the same client (kcat, i.e.
# librdkafka with OpenSSL) producing and consuming the same 1 KiB messages over each,
# BENCH_TLS_REPS (3) times. Prints the broker's CPU per GB for each and TLS's multiple of
# plaintext's (issue target: at most 1.3x). Bounded by message count and timeouts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
TERN="${1:-$ROOT/target/release/tern}"
WORK=$(mktemp -d /tmp/tern-tls-bench.XXXXXX)
COUNT=${BENCH_TLS_COUNT:-500000}
REPS=${BENCH_TLS_REPS:-3}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PLAIN=$(port); SSL=$(port)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
  -keyout "$WORK/key.pem" -out "$WORK/cert.pem" -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 >/dev/null 2>&1
python3 -c "import sys; sys.stdout.buffer.write((b'x' * 1023 + b'\n') * $COUNT)" >"$WORK/messages"
"$TERN" serve --data-dir "$WORK/data" --listeners "PLAINTEXT://127.0.0.1:$PLAIN,SSL://127.0.0.1:$SSL" \
  --tls-cert "$WORK/cert.pem" --tls-key "$WORK/key.pem" --metrics 127.0.0.1:0 --http-enable false \
  --num-partitions 8 >"$WORK/broker.log" 2>&1 &
BROKER=$!
trap 'kill $BROKER 2>/dev/null; wait $BROKER 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/$SSL) 2>/dev/null && break; sleep 0.1; done
HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' /proc/$BROKER/stat; }
kcat_over() { # protocol, kcat arguments...
  local protocol=$1; shift
  if [ "$protocol" = SSL ]; then
    timeout 120 kcat -b "127.0.0.1:$SSL" -X security.protocol=ssl -X ssl.ca.location="$WORK/cert.pem" "$@"
  else
    timeout 120 kcat -b "127.0.0.1:$PLAIN" "$@"
  fi
}
# CPU-s/GB of the broker over one command ("$@"), into PER_GB.
per_gb() {
  local before after
  before=$(ticks); "$@"; after=$(ticks)
  PER_GB=$(awk -v t=$((after - before)) -v hz="$HZ" -v n="$COUNT" 'BEGIN {printf "%.4f", t / hz / (n * 1024 / 1e9)}')
}
echo "== TLS vs plaintext: $COUNT x 1 KiB, kcat, $REPS reps ($(nproc) cores)"
for rep in $(seq 1 "$REPS"); do
  for protocol in PLAINTEXT SSL; do
    topic="tls-$protocol-$rep"
    per_gb kcat_over "$protocol" -P -t "$topic" -X linger.ms=5 -X batch.size=1000000 -l "$WORK/messages"
    echo "$protocol produce $PER_GB" >>"$WORK/results"
    per_gb eval 'kcat_over "$protocol" -C -t "$topic" -e -o beginning -q >/dev/null'
    echo "$protocol consume $PER_GB" >>"$WORK/results"
  done
done
# Median of each (protocol, direction), and SSL's multiple of PLAINTEXT's.
awk '
  {v[$1 " " $2] = v[$1 " " $2] " " $3}
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) {t = a[i]; a[i] = a[j]; a[j] = t}
    return a[int(n / 2) + 1]
  }
  END {
    for (d = 1; d <= 2; d++) {
      dir = d == 1 ? "produce" : "consume"
      p = median(v["PLAINTEXT " dir]); s = median(v["SSL " dir])
      printf "%s 1KiB: plaintext %.3f CPU-s/GB (%s), TLS %.3f CPU-s/GB (%s): TLS %.2fx plaintext\n", dir, p, v["PLAINTEXT " dir], s, v["SSL " dir], (p > 0 ? s / p : 0)
    }
  }' "$WORK/results"
