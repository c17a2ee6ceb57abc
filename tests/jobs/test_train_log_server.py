"""The driver's log server of a barrier-mode training launch (jobs/train/log_server.py).

pyspark picks the server's port with a probe on the driver's address and binds it later, on
every address, in a thread. A port that the probe finds free can be held on another address (a
listener on 127.0.0.1); the thread then dies and the ranks' log lines are lost. A full test run
of 2026-12-04 failed once this way (`test_ranks_as_barrier_tasks_with_local_mode_false`: "OSError:
[Errno 98] Address already in use" in pyspark's log server thread). Here the probe is made to
return such a port, so the case is met every time, without a JVM.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from pyspark.ml.torch import distributor as distributor_module
from pyspark.ml.torch.log_communication import LogStreamingClient, LogStreamingServer

from jobs.config import load_config
from jobs.train import stage as train_stage
from jobs.train.log_server import BoundLogStreamingServer, bound_log_server


@pytest.fixture
def port_held_on_loopback(monkeypatch):
    """A port with a listener on 127.0.0.1 that pyspark's probe reports as free (the probe binds
    the driver's address, where the port is free)."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    monkeypatch.setattr(LogStreamingServer, "_get_free_port", staticmethod(lambda *_: port))
    yield port
    holder.close()


@pytest.fixture
def thread_errors(monkeypatch) -> list[BaseException]:
    """Exceptions that end threads during the test (instead of pytest's warning)."""
    errors: list[BaseException] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: errors.append(args.exc_value))
    return errors


def _received(capsys, line: str, within_s: float = 60.0) -> str:
    """stderr until `line` arrives (the server prints what it reads), or what came meanwhile."""
    seen = ""
    deadline = time.monotonic() + within_s
    while line not in seen and time.monotonic() < deadline:
        seen += capsys.readouterr().err
        time.sleep(0.05)
    return seen


def test_launch_server_streams_a_rank_line_though_the_probed_port_is_taken(
        port_held_on_loopback, thread_errors, capsys):
    with bound_log_server():
        server = distributor_module.LogStreamingServer()  # what TorchDistributor makes
        server.start(spark_host_address="127.0.0.1")
    try:
        assert server.port != port_held_on_loopback
        client = LogStreamingClient("127.0.0.1", server.port)
        client.send("rank 0: round 1 done")
        client.close()
        assert "rank 0: round 1 done" in _received(capsys, "rank 0: round 1 done")
    finally:
        server.shutdown()
    assert thread_errors == []
    assert server.server is None and server.serve_thread is None


def test_pyspark_server_alone_dies_on_the_same_port(port_held_on_loopback, thread_errors):
    """The broken variant the launch replaces (if pyspark mends it, this fails: drop the shim)."""
    server = LogStreamingServer()
    server.start(spark_host_address="127.0.0.1")
    server.serve_thread.join(timeout=60)
    assert not server.serve_thread.is_alive() and server.server is None
    assert [type(e) for e in thread_errors] == [OSError]
    assert "Address already in use" in str(thread_errors[0])


def test_the_bound_server_is_used_for_the_launch_only(monkeypatch):
    """`launch` runs TorchDistributor inside `bound_log_server()`; pyspark's class is back after."""
    used = []

    class Distributor:
        def __init__(self, num_processes, local_mode, use_gpu):
            self.num_processes = num_processes

        def run(self, fn, job):
            used.append(distributor_module.LogStreamingServer)
            return "ranks ran"

    monkeypatch.setattr(distributor_module, "TorchDistributor", Distributor)
    monkeypatch.delenv("PYTHONPATH", raising=False)  # launch adds the project for the ranks
    cfg = load_config(None, ["train.local_mode=false"])
    assert train_stage.launch(None, cfg, job=None, world=2) == "ranks ran"
    assert used == [BoundLogStreamingServer]
    assert distributor_module.LogStreamingServer is LogStreamingServer


def test_a_second_start_is_refused():
    server = BoundLogStreamingServer()
    server.start()
    try:
        with pytest.raises(RuntimeError, match="twice"):
            server.start()
    finally:
        server.shutdown()
