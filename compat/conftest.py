"""pytest fixtures for the real-client compat suite.

`broker` starts a fresh tern process per test (free port on 127.0.0.1, temp data dir),
waits until it accepts TCP connections (30 s at most), yields a tern_harness.Broker
(use .address, .restart(), .kill9(), .start()), and stops it with SIGTERM (SIGKILL
after 15 s) when the test ends. A failing test's report gets the broker's log tail.

Extra `tern serve` flags for one test or module: @pytest.mark.broker_args("--flag", "value", ...)
(e.g. tern_harness.GROUP_ARGS for consumer-group tests); the closest marker wins (a test's
replaces its module's); they apply to every (re)start.
"""

from __future__ import annotations

import itertools
import os

import pytest

from tern_harness import Broker, BrokerError, free_port, tern_bin

_topic_counter = itertools.count()


@pytest.fixture
def broker(tmp_path, request):
    marker = request.node.get_closest_marker("broker_args")  # the test's own, else its module's
    extra_args = [str(a) for a in marker.args] if marker else []
    b = Broker(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", port=free_port(), extra_args=extra_args)
    request.node._tern_broker = b
    start_error = None
    try:
        b.start()
    except BrokerError as e:
        start_error = str(e)
    if start_error:
        pytest.fail(start_error, pytrace=False)
    try:
        yield b
    finally:
        stop_error = None
        try:
            b.stop()
        except BrokerError as e:
            stop_error = str(e)
        if stop_error:
            pytest.fail(stop_error, pytrace=False)


@pytest.fixture
def topic(request):
    """A topic name unique to the test (Kafka topic names: [a-zA-Z0-9._-], max 249)."""
    name = request.node.name
    safe = "".join(c if c.isalnum() or c in "._-" else "-" for c in name)[:150]
    return f"{safe}-{os.getpid()}-{next(_topic_counter)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    b = getattr(item, "_tern_broker", None)
    if b is not None and report.failed and report.when == "call":
        report.sections.append((f"tern broker log ({b.address})", b.log_tail()))


def pytest_configure(config):
    config.addinivalue_line("markers", "broker_args(*args): extra `tern serve` flags for the broker fixture")


def pytest_report_header(config):
    return f"tern binary: {tern_bin()}"
