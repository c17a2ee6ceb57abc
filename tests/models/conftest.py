"""Fixtures of the model tests: one torch thread, a toy data set."""

from __future__ import annotations

import pytest
import torch

from models.data import TrainData
from tests.models._toy import toy_data


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _inductor_env(monkeypatch, tmp_path):
    """torch's first optimiser step sets TORCHINDUCTOR_CACHE_DIR when it is unset (a change to
    os.environ the process guard fails): set it here, so monkeypatch's undo restores it."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))


@pytest.fixture
def toy() -> TrainData:
    return toy_data()
