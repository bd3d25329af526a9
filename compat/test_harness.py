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


def test_a_second_stop_is_a_no_op(tmp_path):
    """A test that stops its broker itself, then the fixture's stop: not 'exited by itself'."""
    b = new_broker(tmp_path)
    assert b.stop() == 0
    assert b.stop() == 0


def test_a_sigterm_during_start_up_exits_0(tmp_path):
    """SIGTERM at several moments of start-up (before the listener is up): status 0, as
    tern's signal handlers are installed before the broker starts."""
    import subprocess
    import time
    from tern_harness import tern_bin
    for delay in (0.05, 0.2, 0.5):  # not 0: before main() no handler can exist
        port = free_port()
        proc = subprocess.Popen([str(tern_bin()), "serve", "--data-dir", str(tmp_path / f"d{delay}"),
                                 "--listen", f"127.0.0.1:{port}", "--http", f"127.0.0.1:{free_port()}",
                                 "--metrics", f"127.0.0.1:{free_port()}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        err = proc.stderr.read().decode(errors="replace")
        assert code == 0, f"SIGTERM {delay}s after spawn: status {code}\n{err[-2000:]}"
        assert "panicked at" not in err, err[-2000:]
