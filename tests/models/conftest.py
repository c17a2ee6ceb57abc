"""Fixtures of the model tests: one torch thread, a toy data set."""

from __future__ import annotations

import pytest
import torch

from models.data import TrainData
from tests.models._toy import toy_data


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


@pytest.fixture
def toy() -> TrainData:
    return toy_data()
