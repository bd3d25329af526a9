"""A share-group consumer (confluent-kafka's ShareConsumer) in its own process, for tests
that kill it: it acquires records in explicit acknowledgement mode, prints each as a JSON
line {"p": partition, "o": offset, "n": delivery count}, acknowledges none, and then
waits (holding their locks) until it is killed or its stdin closes.

Usage: share_worker.py BOOTSTRAP TOPIC GROUP WANT
"""

from __future__ import annotations

import json
import sys
import threading
import time

from confluent_kafka import ShareConsumer


def main() -> None:
    bootstrap, topic, group, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                              "share.acknowledgement.mode": "explicit"})
    consumer.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < want and time.monotonic() < deadline:
        for m in consumer.poll(0.5):
            if m.error():
                continue
            print(json.dumps({"p": m.partition(), "o": m.offset(), "n": m.delivery_count()}), flush=True)
            got += 1
        if got:
            break  # one poll's records held; polling again would need acknowledgements
    print(json.dumps({"holding": got}), flush=True)
    done = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait(120)


if __name__ == "__main__":
    main()
