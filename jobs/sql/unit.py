"""`trajpriv serve --print-systemd-unit`: a systemd unit that runs the endpoints as this
account, in the foreground (`serve --wait`), in a sandbox of systemd's own.

Why a sandbox although the guard refuses user code: it is the layer that holds if the guard
has a hole. The endpoints' account cannot gain privileges (NoNewPrivileges), sees a /tmp of
its own (PrivateTmp), no home folders (ProtectHome) and a read-only file system
(ProtectSystem=strict) with the data root read-only; it writes only its scratch folder
(`serve.scratch`, else systemd's StateDirectory, 0700), where its log, pid file, Hive scratch
and compiled guard live. systemd restarts it when it fails.
"""

from __future__ import annotations

import os
import pwd
import shlex
import sys
from pathlib import Path

STATE_DIRECTORY = "trajpriv-serve"


def unit_text(cfg, config: str | None, overrides: list[str]) -> str:
    """The unit for the endpoints of `cfg`, started with `config` and `overrides` as given."""
    account = pwd.getpwuid(os.getuid()).pw_name
    root = cfg.storage.root.resolve()
    if cfg.serve.scratch is not None:
        scratch, state = Path(cfg.serve.scratch).resolve(), []
    else:
        scratch = Path("/var/lib") / STATE_DIRECTORY
        state = [f"StateDirectory={STATE_DIRECTORY}", "StateDirectoryMode=0700"]
    project = Path(__file__).resolve().parents[2]
    args = [sys.executable, "-m", "jobs.cli", "serve", "--wait"]
    if config:
        args += ["--config", str(Path(config).resolve())]
    args += [f"--set={item}" for item in overrides
             if not item.startswith("serve.scratch=")]
    args.append(f"--set=serve.scratch={scratch}")
    env = {"PYTHONPATH": str(project), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    lines = [
        "[Unit]",
        f"Description=trajpriv analysts' endpoints (JDBC/ODBC port {cfg.serve.port}, "
        f"Spark Connect port {cfg.serve.connect_port})",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"User={account}",
        *([f"Group={cfg.publish.group}"] if cfg.publish.group else []),
        *(f"Environment={shlex.quote(f'{k}={v}')}" for k, v in env.items()),
        f"WorkingDirectory={scratch}",
        "ExecStart=" + " ".join(shlex.quote(a) for a in args),
        "UMask=0077",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        f"ReadOnlyPaths={root}",
        *state,
        f"ReadWritePaths={scratch}",
        "Restart=on-failure",
        "RestartSec=10",
        "TimeoutStopSec=150",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def home_warning() -> str | None:
    """Why the unit cannot start from here, when the interpreter or the project lives in a
    home folder (ProtectHome hides them), else None."""
    project = Path(__file__).resolve().parents[2]
    for path in (Path(sys.executable).resolve(), project):
        if path.is_relative_to("/home") or path.is_relative_to("/root"):
            return (f"{path} is under a home folder, which ProtectHome=yes hides from the "
                    "service: install trajpriv and its venv under /opt or /srv first")
    return None
