"""Pseudonyms and per-user seeds: stable under the key, unlinkable without it, private on disk."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import numpy as np
import pytest

from jobs.keys import pseudonym, pseudonym_key, run_key, user_seed
from udfs.errors import ConfigError


def test_keys_created_once_with_private_modes(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("TRAJPRIV_PSEUDONYM_KEY", raising=False)
    folder = tmp_path / "secrets"
    first = pseudonym_key(folder)
    assert pseudonym_key(folder) == first
    assert run_key(folder) != first
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(folder / "pseudonym.key").st_mode) == 0o600


def test_environment_key_wins_and_is_validated(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TRAJPRIV_PSEUDONYM_KEY", "ab" * 16)
    assert pseudonym_key(tmp_path) == bytes.fromhex("ab" * 16)
    monkeypatch.setenv("TRAJPRIV_PSEUDONYM_KEY", "not-hex")
    with pytest.raises(ConfigError, match="must be hex"):
        pseudonym_key(tmp_path)


def test_pseudonym_is_keyed_and_hides_the_id() -> None:
    a, b = b"k" * 32, b"j" * 32
    assert pseudonym(a, "user42") == pseudonym(a, "user42")
    assert pseudonym(a, "user42") != pseudonym(b, "user42")
    assert "user42" not in pseudonym(a, "user42") and len(pseudonym(a, "user42")) == 16


def test_user_seed_depends_on_key_scope_and_user_only() -> None:
    key = b"s" * 32
    draw = lambda seq: np.random.default_rng(seq).integers(0, 2**31, 4).tolist()  # noqa: E731
    assert draw(user_seed(key, "atp|4.0", "u1")) == draw(user_seed(key, "atp|4.0", "u1"))
    assert draw(user_seed(key, "atp|4.0", "u1")) != draw(user_seed(key, "atp|4.0", "u2"))
    assert draw(user_seed(key, "atp|4.0", "u1")) != draw(user_seed(key, "tp|4.0", "u1"))
    assert draw(user_seed(key, "atp|4.0", "u1")) != draw(user_seed(b"t" * 32, "atp|4.0", "u1"))
