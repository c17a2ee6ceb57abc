"""The warm `trajpriv sql` server: one SparkSession of one storage.root behind a unix socket.

Started by `jobs.sql.client.ensure_server` (never by hand), it detaches, opens the catalog
read-only (`get_spark(readonly=True, serving=True)`), listens on `client.socket_path(root)`
(mode 0600; a connection from another uid is closed unanswered) and answers one request at a
time: `ping`, `query` (statements run in order by `jobs.sql.engine`; the first failure ends the
script, its stack trace goes to the log, the reply holds one line) and `stop`. It stops after
`--idle-timeout` seconds without a request, on `stop` (what `trajpriv sql --stop` and a stage
that needs the root send) and on SIGTERM, and then ends its JVM before it exits, so Derby's lock
and the root's lock are free once its pid is gone.

Its stdout and stderr (the JVM's included) go to `<root>/logs/sql-server.log`.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

from jobs.sql import client

log = logging.getLogger("trajpriv.sql.server")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="jobs.sql.server")
    parser.add_argument("--config", required=True)
    parser.add_argument("--set", dest="overrides", action="append", default=[])
    parser.add_argument("--ready-fd", type=int, required=True)
    parser.add_argument("--idle-timeout", type=float, default=None)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    ready = args.ready_fd

    def say(text: str) -> None:
        os.write(ready, (" ".join(text.split()) + "\n").encode())

    try:
        from jobs.config import load_config
        from jobs.harness import describe_failure

        cfg = load_config(args.config, args.overrides)
        root = cfg.storage.root.resolve()
        from jobs.spark.relocation import require_existing_root
        from jobs.spark.session import check_owner, check_root

        require_existing_root(root)
        check_owner(root)
        check_root(root, cfg.storage.min_free_mb)
    except Exception as exc:  # the config or the root: the client prints this one line
        say(f"ERROR {exc}")
        return 2
    if os.fork() > 0:  # the launcher exits; the server lives on, reparented, in its session
        os._exit(0)
    os.umask(0o077)
    _redirect_output(client.log_path(root))
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        from jobs.spark.session import get_spark

        spark = get_spark(cfg, readonly=True, serving=True)
        listener = _listen(client.socket_path(root))
    except Exception as exc:
        log.exception("sql server for %s could not start", root)
        say(f"ERROR {describe_failure(exc)}")
        return 2
    say(f"READY {os.getpid()}")
    os.close(ready)
    log.info("sql server for %s ready on %s (pid %d)", root, client.socket_path(root),
             os.getpid())
    try:
        serve(spark, listener, client.idle_timeout(args.idle_timeout))
    finally:
        _close(client.socket_path(root), listener)
        _stop_jvm(spark)
        log.info("sql server for %s stopped", root)
    return 0


def _redirect_output(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)


def _listen(path: Path) -> socket.socket:
    """A listening socket at `path`, 0600; a stale socket file (a killed server) is replaced,
    a live one (another server answers) is an error."""
    if path.exists() or path.is_symlink():
        if _answers(path):
            raise client.ServerError(f"another sql server already listens on {path}")
        path.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # the socket file is created 0600, never briefly wider
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(16)
    return sock


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(2.0)
        probe.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def _close(path: Path, listener: socket.socket) -> None:
    """Remove the socket file, then close: while it is open it answers, so no successor can
    have replaced the file we remove."""
    try:
        path.unlink()
    except OSError:
        pass
    listener.close()


class _Stop(Exception):
    pass


def serve(spark: Any, listener: socket.socket, idle_s: float) -> None:
    """Answer requests one at a time until `stop`, SIGTERM or `idle_s` seconds without one."""

    def on_term(signum, frame):
        raise _Stop

    signal.signal(signal.SIGTERM, on_term)
    last = time.monotonic()
    try:
        while True:
            left = idle_s - (time.monotonic() - last)
            if left <= 0:
                log.info("idle for %.0f s: stopping", idle_s)
                return
            listener.settimeout(min(left, 60.0))
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                if not _same_user(conn):
                    log.warning("refused a connection from another user")
                    continue
                conn.settimeout(300.0)
                if not _handle(spark, conn):
                    return
            finally:
                conn.close()
                last = time.monotonic()
    except _Stop:
        log.info("SIGTERM: stopping")


def _same_user(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def _read_line(conn: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        data += chunk
        if len(data) > client.MAX_LINE:
            raise ValueError("request too large")
    return data


def _handle(spark: Any, conn: socket.socket) -> bool:
    """Answer one request; False when it asked the server to stop."""
    try:
        req = json.loads(_read_line(conn) or b"{}")
    except (ValueError, OSError) as exc:
        _reply(conn, {"ok": False, "error": f"bad request: {exc}"})
        return True
    op = req.get("op")
    if op == "ping":
        _reply(conn, {"ok": True, "pid": os.getpid()})
        return True
    if op == "stop":
        log.info("asked to stop")
        _reply(conn, {"ok": True, "pid": os.getpid()})
        return False
    if op == "query":
        _reply(conn, run_script(spark, req.get("statements", []), bool(req.get("trusted")),
                                int(req.get("limit", 100))))
        return True
    _reply(conn, {"ok": False, "error": f"unknown request {op!r}"})
    return True


def run_script(spark: Any, statements: list[str], trusted: bool, limit: int) -> dict:
    """Run `statements` in order; the results so far and, at the first failure, its index and
    one line (the full trace goes to the log)."""
    from jobs.harness import describe_failure
    from jobs.sql.engine import run_statement

    results = []
    for i, sql in enumerate(statements):
        try:
            results.append(run_statement(spark, sql, trusted=trusted, limit=limit))
        except Exception as exc:
            log.info("statement %d failed: %s", i + 1, sql, exc_info=True)
            return {"ok": False, "results": results, "failed": i,
                    "error": describe_failure(exc)}
    return {"ok": True, "results": results}


def _reply(conn: socket.socket, payload: dict) -> None:
    try:
        conn.sendall(json.dumps(payload, allow_nan=True).encode() + b"\n")
    except OSError as exc:  # the client went away (Ctrl-C): nothing to answer
        log.info("client gone before the reply: %s", exc)


def _stop_jvm(spark: Any) -> None:
    """Stop the session and end the JVM, so Derby's lock is released before this pid ends."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    try:
        spark.stop()
    finally:
        if gateway is not None:
            try:
                gateway.shutdown()
            except Exception:  # the JVM already gone
                pass
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except Exception:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    sys.exit(main())
