"""The driver's log server of a barrier-mode TorchDistributor launch, bound without a race.

With train.local_mode=false TorchDistributor starts a small TCP server on the driver that the
barrier tasks stream their ranks' log lines to. pyspark 4 picks its port by binding a probe
socket to (spark.driver.host, 0), closing it, and binding ("0.0.0.0", port) later in a thread.
Both halves can fail: another process may take the port in between (a time-of-check race), and
a port free on the driver's address may be held on another one, such as a listener on
127.0.0.1 (a wildcard bind conflicts with it; the probe on one address does not see it). The
thread then dies with "Address already in use", the ranks' log lines are lost without a word
to the caller, and the traceback lands on stderr. A deterministic reproduction is in
tests/jobs/test_train_log_server.py.

`BoundLogStreamingServer` binds ("0.0.0.0", 0) itself, in the caller's thread, and reads the
port the kernel chose: the port is held from the moment it is known, so nothing can take it,
and a failure to bind raises in `start`, where TorchDistributor catches it and logs a warning
(its documented fallback: train without the log stream). `bound_log_server()` puts it in place
for one launch only; pyspark's module is restored after it.
"""

from __future__ import annotations

import contextlib
import socketserver
import threading
from collections.abc import Iterator

from pyspark.ml.torch import distributor as distributor_module
from pyspark.ml.torch.log_communication import LogStreamingServer, WriteLogToStdout

POLL_S = 0.1  # how often the server looks at its shutdown flag (pyspark's own interval)


class BoundLogStreamingServer(LogStreamingServer):
    """pyspark's `LogStreamingServer` with its socket bound before its port is handed out."""

    def start(self, spark_host_address: str = "") -> None:  # noqa: ARG002 - binds all addresses
        if self.server:
            raise RuntimeError("Cannot start the server twice.")
        # The address pyspark's own server listens on; the tasks connect to the driver host.
        server = socketserver.ThreadingTCPServer(("0.0.0.0", 0), WriteLogToStdout)
        server.is_active = True
        self.server = server
        self.port = server.server_address[1]
        self.serve_thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": POLL_S},
            name="torch-log-server", daemon=True)
        self.serve_thread.start()

    def shutdown(self) -> None:
        server = self.server
        super().shutdown()  # stops serving and joins the thread
        if server is not None:
            server.server_close()  # pyspark's thread closed its socket on leaving its `with`


@contextlib.contextmanager
def bound_log_server() -> Iterator[None]:
    """TorchDistributor launches inside this block use `BoundLogStreamingServer`."""
    upstream = distributor_module.LogStreamingServer
    distributor_module.LogStreamingServer = BoundLogStreamingServer
    try:
        yield
    finally:
        distributor_module.LogStreamingServer = upstream
