"""Keyed derivations: every pseudonym, keyed hash and secret seed is HMAC-SHA256 made here.

What it holds: the one HMAC-SHA256 primitive of the project and its three read-outs, all over
the same message rule: the parts, each turned into text with `str`, joined by the unit
separator "\\x1f" and encoded as UTF-8 (one part is the message itself):
- `digest`: the 32-byte MAC;
- `hex_digest`: its hex form, optionally truncated (pseudonyms, traj_keys);
- `int_digest`: its first `nbytes` bytes as a big-endian integer (the whole MAC as a
  SeedSequence entropy, 8 bytes signed as a Spark hash salt);
- `seed63`: a non-negative 63-bit integer seed (the first 8 bytes shifted right by one).

Why one home: the keys (jobs/keys.py) are secrets of the raw zone, and what is derived from them
(pseudonyms, keyed trajectory hashes, the per-user noise seeds, the training, holdout and
synthesis seeds) must never change for a given key and message, or published tables would be
re-keyed and retried tasks would draw other noise. With one message rule and one primitive,
the call sites (jobs/keys.py, jobs/train/stage.py, jobs/train/data.py,
jobs/synthesize/stage.py, udfs/collect_kernel.py) can only differ in their parts, and
tests/udfs/test_derive.py pins their outputs. Pure stdlib: no numpy, no pyspark.
"""

from __future__ import annotations

import hashlib
import hmac

SEP = "\x1f"  # ASCII unit separator: never part of an id, a date or a number's text
DIGEST_BYTES = hashlib.sha256().digest_size


def message(*parts: object) -> bytes:
    """The bytes a derivation authenticates: str(part) joined by SEP, UTF-8."""
    if not parts:
        raise ValueError("a derivation needs at least one message part")
    return SEP.join(map(str, parts)).encode("utf-8")


def digest(key: bytes, *parts: object) -> bytes:
    """HMAC-SHA256(key, message(*parts)): the 32-byte MAC."""
    return hmac.new(key, message(*parts), hashlib.sha256).digest()


def hex_digest(key: bytes, *parts: object, chars: int | None = None) -> str:
    """The MAC as lowercase hex, truncated to `chars` characters when given."""
    text = hmac.new(key, message(*parts), hashlib.sha256).hexdigest()
    return text if chars is None else text[:chars]


def int_digest(key: bytes, *parts: object, nbytes: int = DIGEST_BYTES,
               signed: bool = False) -> int:
    """The first `nbytes` bytes of the MAC as a big-endian integer (two's complement if
    `signed`)."""
    if not 1 <= nbytes <= DIGEST_BYTES:
        raise ValueError(f"nbytes={nbytes} must be in 1..{DIGEST_BYTES}")
    return int.from_bytes(digest(key, *parts)[:nbytes], "big", signed=signed)


def seed63(key: bytes, *parts: object) -> int:
    """A seed in [0, 2**63): the first 8 bytes of the MAC, shifted right by one bit (fits any
    signed 64-bit seed argument, e.g. torch.Generator.manual_seed)."""
    return int_digest(key, *parts, nbytes=8) >> 1
