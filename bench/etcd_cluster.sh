# Sourced by the cluster benchmarks (replication.sh, follower.sh), which set WORK (a
# scratch directory) and TERN (the binary). Starts etcd on a free port (ETCD_PORT);
# `start_broker NODE [serve flags...]` starts a broker of that cluster on free ports
# (KPORT[NODE], MPORT[NODE]; kept when the node is started again) and waits for its Kafka
# port (BPID[NODE] its PID). On exit every process started here is ended and WORK removed.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ETCD_PORT=$(port); ETCD_PEER=$(port)
etcd --data-dir "$WORK/etcd" --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-cluster "default=http://127.0.0.1:$ETCD_PEER" \
  >"$WORK/etcd.log" 2>&1 &
PIDS=($!)
cleanup() { kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/$ETCD_PORT) 2>/dev/null && break; sleep 0.1; done
declare -A KPORT BPID MPORT
start_broker() { # node [serve flags...]
  local node=$1; shift
  [ -n "${KPORT[$node]:-}" ] || KPORT[$node]=$(port)
  [ -n "${MPORT[$node]:-}" ] || MPORT[$node]=$(port)
  "$TERN" serve --data-dir "$WORK/data-$node" --listen "127.0.0.1:${KPORT[$node]}" --node-id "$node" \
    --etcd "http://127.0.0.1:$ETCD_PORT" --etcd-lease-ttl-secs 3 --metrics "127.0.0.1:${MPORT[$node]}" \
    "$@" >>"$WORK/broker-$node.log" 2>&1 &
  BPID[$node]=$!; PIDS+=($!)
  for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/${KPORT[$node]}) 2>/dev/null && break; sleep 0.1; done
}
