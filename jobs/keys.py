"""Keys of the raw zone: the pseudonym key and the run seed key (a stdlib-safe module name).

Why keys and not the config seed: published tables must not let anyone recompute a user's noise
or link a pseudonym back to a raw id. Both keys are 32 random bytes created once under
`<storage.root>/secrets/` (folder 0700, files 0600), or taken from the environment
(`TRAJPRIV_PSEUDONYM_KEY`, `TRAJPRIV_RUN_KEY`, hex) in a deployment that keeps secrets elsewhere.
They are never written to a published table, a log line or the runs table.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import numpy as np

from udfs.derive import hex_digest, hex_digests, int_digest
from udfs.errors import ConfigError

PSEUDONYM_HEX_CHARS = 16  # 64 bits: collision-free at millions of users, short enough to read


def _load_or_create(folder: Path, name: str, env_var: str) -> bytes:
    from_env = os.environ.get(env_var)
    if from_env:
        try:
            key = bytes.fromhex(from_env)
        except ValueError:
            raise ConfigError(f"{env_var} must be hex (e.g. `openssl rand -hex 32`)") from None
        if len(key) < 16:
            raise ConfigError(f"{env_var} must hold at least 16 bytes (32 hex characters)")
        return key
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    path = folder / name
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return bytes.fromhex(path.read_text().strip())
    with os.fdopen(fd, "w") as handle:
        handle.write(secrets.token_hex(32))
    return bytes.fromhex(path.read_text().strip())


def pseudonym_key(secrets_dir: Path) -> bytes:
    return _load_or_create(secrets_dir, "pseudonym.key", "TRAJPRIV_PSEUDONYM_KEY")


def run_key(secrets_dir: Path) -> bytes:
    return _load_or_create(secrets_dir, "run_seed.key", "TRAJPRIV_RUN_KEY")


def pseudonym(key: bytes, user_id: str) -> str:
    """HMAC-SHA256(key, user_id), truncated: stable per key, unlinkable without it."""
    return hex_digest(key, user_id, chars=PSEUDONYM_HEX_CHARS)


def pseudonyms(key: bytes, messages) -> list[str]:
    """`pseudonym(key, m)` of each message, in one loop (the plan's traj_keys)."""
    return hex_digests(key, messages, chars=PSEUDONYM_HEX_CHARS)


def user_seed(key: bytes, scope: str, user_id: str) -> np.random.SeedSequence:
    """The secret per-user seed of one release scope (dataset, window, mechanism, epsilon, label).

    Derived by HMAC from the run key, so it never depends on partitioning or task attempts (a
    retried task redraws the same noise) and cannot be recomputed from published values.
    """
    return np.random.SeedSequence(int_digest(key, scope, user_id))
