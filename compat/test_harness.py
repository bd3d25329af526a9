"""The harness fails a test whose broker misbehaved, even when the test itself passed:
a panic in any of its logs, or a broker that exited by itself (issue 24). Each condition
is injected once here."""

from __future__ import annotations

import os
import signal

import pytest

from tern_harness import Broker, BrokerError, free_port, wait_until


def new_broker(tmp_path) -> Broker:
    return Broker(data_dir=tmp_path / "data", log_dir=tmp_path / "logs", port=free_port()).start()


def test_a_panic_in_the_broker_log_fails_the_stop(tmp_path):
    b = new_broker(tmp_path)
    b.kill9()  # so that nothing writes the log after the injected line
    with open(b.log_paths[-1], "a") as log:
        log.write("thread 'tokio-runtime-worker' panicked at src/x.rs:1:1:\ninjected\n")
    with pytest.raises(BrokerError, match="panicked"):
        b.stop()


def test_a_broker_that_exits_by_itself_fails_the_stop(tmp_path):
    b = new_broker(tmp_path)
    os.kill(b.pid, signal.SIGKILL)  # not through kill9(): the harness did not mean it
    wait_until(lambda: not b.alive(), 10, what="the broker gone")
    with pytest.raises(BrokerError, match="exited by itself"):
        b.stop()


def test_a_clean_sigterm_and_a_deliberate_kill9_pass(tmp_path):
    b = new_broker(tmp_path)
    assert b.stop() == 0
    b.start()
    b.kill9()
    b.stop()  # a kill9() the test asked for is no failure
