"""Atomic checkpoints: write to a temporary file in the same folder, then os.replace.

A reader never sees a half-written checkpoint: os.replace is atomic on POSIX within one file
system, so `latest.pt` is either the previous complete checkpoint or the new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch

from udfs.errors import InputDataError

NAME = "latest.pt"


def save_checkpoint(state: dict, folder: str | os.PathLike) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ckpt-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(state, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, folder / NAME)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return folder / NAME


def load_checkpoint(folder: str | os.PathLike) -> dict | None:
    """The latest checkpoint in `folder`, or None when there is none."""
    path = Path(folder) / NAME
    if not path.exists():
        return None
    try:
        return torch.load(path, weights_only=False)
    except Exception as exc:  # corrupt file: say which and why
        raise InputDataError(
            f"checkpoint {path} is unreadable ({exc}); delete it to restart") from exc
