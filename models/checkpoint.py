"""Atomic checkpoints: write to a temporary file in the same folder, then os.replace
(`udfs.atomic.atomic_open`, the project's one atomic write).

A reader never sees a half-written checkpoint: os.replace is atomic on POSIX within one file
system, so `latest.pt` is either the previous complete checkpoint or the new one.
Test seam `udfs.faults.checkpoint_write` (TRAJPRIV_FAULT_CHECKPOINT, off unless a test sets it)
cuts a write short between the data and the fsync.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from udfs import faults
from udfs.atomic import atomic_open
from udfs.errors import InputDataError

NAME = "latest.pt"


def to_cpu(obj: Any) -> Any:
    """`obj` (nested dicts, lists, tuples of tensors) with every tensor on the CPU, for saving."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_cpu(v) for v in obj]
    if isinstance(obj, tuple):
        items = [to_cpu(v) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return obj


@dataclass(frozen=True)
class Checkpointing:
    """Where a training run saves its checkpoints (`folder/latest.pt`), and whether it first
    resumes from the one there."""

    folder: str | os.PathLike
    resume: bool = False


def save_checkpoint(state: dict, folder: str | os.PathLike, name: str = NAME) -> Path:
    """Write `state` atomically to `folder/name` (default `latest.pt`); returns the path."""
    folder = Path(folder)
    with atomic_open(folder / name, binary=True, prefix=".ckpt-") as fh:
        torch.save(state, fh)
        fh.flush()
        faults.checkpoint_write(fh, state.get("round"), folder.name)  # test seam
    return folder / name


def load_checkpoint(folder: str | os.PathLike, name: str = NAME) -> dict | None:
    """The checkpoint `folder/name` (default `latest.pt`), or None when there is none."""
    path = Path(folder) / name
    if not path.exists():
        return None
    try:
        return torch.load(path, weights_only=False)
    except Exception as exc:  # corrupt file: say which and why
        raise InputDataError(
            f"checkpoint {path} is unreadable ({exc}); delete it to restart") from exc
