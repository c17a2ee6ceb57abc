"""Find, start, ask and stop the warm `trajpriv sql` server of a storage.root.

No pyspark here: a warm query costs this process one Python start, one config load and a
round trip on a unix socket. The protocol is one JSON request line and one JSON reply line per
connection (`request`).

Where the socket lives: `<storage.root>/sql.sock` (the root is 0700, the socket 0600, and the
server also checks the peer's uid), or, when that path is too long for a unix socket (108
bytes), `/tmp/trajpriv-<uid>/<hash of the root>.sock` in a 0700 folder of the user's own.
Starting is serialised by a lock file per root in that folder, so two `trajpriv sql` started
together share one server instead of racing for the root.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from udfs.errors import TrajprivError

SOCKET_NAME = "sql.sock"
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes; leave room
IDLE_ENV = "TRAJPRIV_SQL_IDLE_S"
DEFAULT_IDLE_S = 600.0
START_TIMEOUT_S = 600.0  # a cold start on a loaded machine (JVM, metastore, catalog relocation)
MAX_LINE = 64 * 2**20


class ServerError(TrajprivError):
    """The server could not be started or reached, or refused a request; one line."""


def runtime_dir() -> Path:
    """`/tmp/trajpriv-<uid>` (or under $XDG_RUNTIME_DIR), 0700 and owned by this user."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or "/tmp")
    folder = base / f"trajpriv-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = folder.lstat()
    if st.st_uid != os.getuid() or not os.path.isdir(folder) or os.path.islink(folder):
        raise ServerError(f"{folder} is not a folder of this user: remove it and rerun")
    os.chmod(folder, 0o700)
    return folder


def _tag(root: Path) -> str:
    return hashlib.sha256(str(root).encode()).hexdigest()[:16]


def socket_path(root: Path) -> Path:
    """Where the server of `root` (an absolute path) listens."""
    path = root / SOCKET_NAME
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        return path
    return runtime_dir() / f"{_tag(root)}.sock"


def log_path(root: Path) -> Path:
    """The server's log (its Python log and the JVM's stderr): stack traces live here."""
    return root / "logs" / "sql-server.log"


def idle_timeout(value: float | None = None) -> float:
    """Seconds of idleness after which a server stops: `value`, else $TRAJPRIV_SQL_IDLE_S, else
    DEFAULT_IDLE_S."""
    if value is not None:
        return float(value)
    return float(os.environ.get(IDLE_ENV) or DEFAULT_IDLE_S)


def request(root: Path, payload: dict[str, Any], timeout_s: float | None = None) -> dict | None:
    """Send `payload` to the server of `root`; its reply, or None when no server listens."""
    path = socket_path(root)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(5.0)
        try:
            sock.connect(str(path))
        except (FileNotFoundError, ConnectionRefusedError):
            return None
        sock.settimeout(timeout_s)
        sock.sendall(json.dumps(payload).encode() + b"\n")
        chunks = []
        while True:
            data = sock.recv(1 << 20)
            if not data:
                break
            chunks.append(data)
            if data.endswith(b"\n"):
                break
    except OSError as exc:
        raise ServerError(f"the sql server at {path} did not answer ({exc}); stop it with "
                          "`trajpriv sql --stop` and rerun") from None
    finally:
        sock.close()
    if not chunks:
        return None  # it closed without a word: stopping
    return json.loads(b"".join(chunks))


def ensure_server(root: Path, config: str, overrides: list[str], idle_s: float) -> dict:
    """The ping reply of the server of `root`, starting one (`config` and `overrides` give its
    session) when none answers. ServerError with the server's one line when it cannot start."""
    reply = request(root, {"op": "ping"})
    if reply is not None:
        return reply
    lock = os.open(runtime_dir() / f"{_tag(root)}.start.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one starter per root; the next finds it running
        reply = request(root, {"op": "ping"})
        if reply is not None:
            return reply
        _start(root, config, overrides, idle_s)
        reply = request(root, {"op": "ping"})
        if reply is None:
            raise ServerError(f"the sql server said it was ready but does not answer at "
                              f"{socket_path(root)}; see {log_path(root)}")
        return reply
    finally:
        os.close(lock)


def _start(root: Path, config: str, overrides: list[str], idle_s: float) -> None:
    """Spawn `python -m jobs.sql.server` detached and wait for its READY (or ERROR) line."""
    read_fd, write_fd = os.pipe()
    cmd = [sys.executable, "-m", "jobs.sql.server", "--config", config, "--ready-fd",
           str(write_fd), "--idle-timeout", str(idle_s)]
    for item in overrides:
        cmd += ["--set", item]
    project = Path(__file__).resolve().parents[2]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(project), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen(cmd, pass_fds=(write_fd,), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    os.close(write_fd)
    try:
        text = _read_all(read_fd, START_TIMEOUT_S)
    finally:
        os.close(read_fd)
        proc.wait()  # the launcher exits once the server has forked away (no zombie)
    if text.startswith("READY"):
        return
    if text.startswith("ERROR "):
        raise ServerError(text[len("ERROR "):].strip())
    raise ServerError(f"the sql server for {root} stopped while starting; see {log_path(root)}")


def _read_all(fd: int, timeout_s: float) -> str:
    """Everything written to `fd` until its writers close it (or `timeout_s` passes)."""
    deadline = time.monotonic() + timeout_s
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServerError(f"the sql server did not start within {timeout_s:.0f} s")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return data.decode(errors="replace")
            data += chunk
            if data.endswith(b"\n") and data.startswith((b"READY", b"ERROR ")):
                return data.decode(errors="replace")


def stop_server(root: Path, wait_s: float = 120.0) -> int | None:
    """Ask the server of `root` to stop and wait until its process (and JVM) is gone; the pid
    it had, or None when none was running."""
    reply = request(root, {"op": "stop"}, timeout_s=wait_s)
    if reply is None:
        return None
    pid = int(reply["pid"])
    deadline = time.monotonic() + wait_s
    while _alive(pid):
        if time.monotonic() > deadline:
            raise ServerError(f"the sql server (pid {pid}) did not stop within {wait_s:g} s; "
                              f"see {log_path(root)}")
        time.sleep(0.1)
    return pid


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, finished but not yet reaped, counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
