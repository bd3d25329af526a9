#!/usr/bin/env python3
"""A stateful stream-processing job on a real library, in its own process, for
test_streams.py (issue 13): Faust (faust-streaming) counts records per key.

    python streams_app.py '{"broker": "127.0.0.1:9092", "app_id": "a", "input": "in",
                            "output": "out", "datadir": "/tmp/x", "partitions": 3}'

The job: consume the keyed input topic, keep a count per key in a Faust Table (RocksDB
store under "datadir", through rocksdict; the table's changelog topic
"<app_id>-counts-changelog" is created by Faust with cleanup.policy=compact), and send
key -> count (the count as decimal text) to the output topic after each record.
processing_guarantee is at_least_once (no transactions): Faust flushes the changelog and
output writes before it commits the input offsets, every commit_interval seconds.

"changelog_configs" (optional, a JSON object of strings) is passed to the table as
extra_topic_configs, i.e. set on the changelog topic when Faust creates it.

Prints one JSON object per line on stdout (flushed at once); Faust's logs go to stderr:
  {"ev": "start", "pid": 123}
  {"ev": "recovered", "table": {"k1": 4, ...}}   the table after a rebalance's recovery from
                                                 the changelog, before input resumes
  {"ev": "count", "p": 0, "o": 17, "key": "k1", "n": 5}   one input record processed
Closing stdin (or SIGTERM) stops the worker cleanly; the test also kill -9s it.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

# stdout carries only our JSON lines: keep a private handle to it, and send anything else
# printed to fd 1 (Faust's banner, mode's logging) to stderr.
_out = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr
_out_lock = threading.Lock()


def emit(ev: str, **fields) -> None:
    line = json.dumps({"ev": ev, **fields}, default=str)
    with _out_lock:
        _out.write(line + "\n")
        _out.flush()


def watch_stdin() -> None:
    """SIGTERM to ourselves when stdin reaches EOF (the parent closed it or died): Faust's
    worker shuts down cleanly on SIGTERM."""
    try:  # os.read, not sys.stdin: a daemon thread blocked in a buffered read aborts shutdown
        while os.read(0, 4096):
            pass
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    a = json.loads(sys.argv[1])
    import faust

    app = faust.App(
        a["app_id"],
        broker=f"kafka://{a['broker']}",
        store="rocksdb://",
        datadir=a["datadir"],
        topic_partitions=int(a["partitions"]),
        topic_replication_factor=1,
        processing_guarantee="at_least_once",
        broker_commit_interval=0.5,
        consumer_auto_offset_reset="earliest",
        web_enabled=False,
        # Short session so a kill -9'd worker's group membership ends quickly.
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
    )
    source = app.topic(a["input"], key_type=bytes, value_type=bytes, key_serializer="raw",
                       value_serializer="raw")
    sink = app.topic(a["output"], key_type=bytes, value_type=bytes, key_serializer="raw",
                     value_serializer="raw")
    counts = app.Table("counts", default=int, partitions=int(a["partitions"]),
                       key_type=str, value_type=int,
                       extra_topic_configs=dict(a.get("changelog_configs") or {}))

    @app.on_rebalance_complete.connect
    async def on_rebalance_complete(sender, **kwargs) -> None:
        emit("recovered", table={k: v for k, v in counts.items()})

    @app.agent(source)
    async def count(stream):
        async for event in stream.events():
            key = event.key.decode()
            counts[key] += 1
            n = counts[key]
            await sink.send(key=event.key, value=str(n).encode())
            emit("count", p=event.message.partition, o=event.message.offset, key=key, n=n)

    emit("start", pid=os.getpid())
    threading.Thread(target=watch_stdin, name="stdin-watch", daemon=True).start()
    worker = faust.Worker(app, loglevel="INFO")
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
