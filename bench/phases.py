"""Where a request's time went, from the brokers' own histograms: p50/p99/p99.9 and the
largest bucket of each phase of `tern_request_phase_seconds` (queue: read, waiting to
run; local: the handler; remote: replication or long-poll wait) for one API, over the
requests between two scrapes of one or more brokers' /metrics.

    python3 bench/phases.py --save before.json URL...        # before a run
    python3 bench/phases.py --since before.json --api Produce URL...  # after it

Bucket bounds are the broker's (50 µs up): a figure is the upper bound of its bucket.
"""

from __future__ import annotations

import argparse
import json
import re
import urllib.request

LINE = re.compile(r'^tern_request_phase_seconds_bucket\{(?P<labels>[^}]*)\} (?P<count>[0-9.e+]+)$')
LABEL = re.compile(r'(\w+)="([^"]*)"')


def scrape(urls: list[str]) -> dict[str, int]:
    """Bucket counts summed over the brokers: "api|phase|le" -> count."""
    total: dict[str, int] = {}
    for url in urls:
        with urllib.request.urlopen(url, timeout=10) as response:
            for line in response.read().decode().splitlines():
                m = LINE.match(line)
                if not m:
                    continue
                labels = dict(LABEL.findall(m["labels"]))
                key = f'{labels.get("api")}|{labels.get("phase")}|{labels.get("le")}'
                total[key] = total.get(key, 0) + int(float(m["count"]))
    return total


def report(now: dict[str, int], before: dict[str, int], api: str) -> list[str]:
    phases: dict[str, list[tuple[float, int]]] = {}
    for key, count in now.items():
        key_api, phase, le = key.split("|")
        if key_api == api:
            bound = float("inf") if le == "+Inf" else float(le)
            phases.setdefault(phase, []).append((bound, count - before.get(key, 0)))
    lines = []
    for phase in ("queue", "local", "remote"):
        buckets = sorted(phases.get(phase, []))
        if not buckets or buckets[-1][1] == 0:
            continue
        n = buckets[-1][1]

        def upper(q: float) -> str:
            bound = next(b for b, c in buckets if c >= q * n)
            return "inf" if bound == float("inf") else f"{bound * 1e3:g}"

        largest = next(b for b, c in buckets if c == n)
        largest_text = "inf" if largest == float("inf") else f"{largest * 1e3:g}"
        lines.append(f"{api} {phase:6} n={n} p50<={upper(0.5)}ms p99<={upper(0.99)}ms "
                     f"p99.9<={upper(0.999)}ms max<={largest_text}ms")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("urls", nargs="+")
    parser.add_argument("--save")
    parser.add_argument("--since")
    parser.add_argument("--api", default="Produce")
    args = parser.parse_args()
    now = scrape(args.urls)
    if args.save:
        with open(args.save, "w") as f:
            json.dump(now, f)
        return
    before = {}
    if args.since:
        with open(args.since) as f:
            before = json.load(f)
    for line in report(now, before, args.api):
        print(f"  phases: {line}")


if __name__ == "__main__":
    main()
