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
the call sites (jobs/keys.py, jobs/train/stage.py, jobs/spark/split.py,
jobs/synthesize/stage.py, udfs/collect_kernel.py) can only differ in their parts, and
tests/udfs/test_derive.py pins their outputs. Pure stdlib: no numpy, no pyspark.
"""

from __future__ import annotations

import functools
import hashlib

SEP = "\x1f"  # ASCII unit separator: never part of an id, a date or a number's text
DIGEST_BYTES = hashlib.sha256().digest_size
_BLOCK = hashlib.sha256().block_size


@functools.lru_cache(maxsize=32)
def _pads(key: bytes):
    """SHA-256 states after the inner and the outer padded key of HMAC (RFC 2104), hashed once
    per key. Why not `hmac.new` per message: it sets up an OpenSSL HMAC context each time
    (about 4 us); copying these two states costs about 1.4 us, and collect derives a key per
    trajectory (a million per Telecom-scale release). tests/udfs/test_derive.py checks the
    MAC equals `hmac.new`'s for keys shorter and longer than a block."""
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return (hashlib.sha256(bytes(b ^ 0x36 for b in key)),
            hashlib.sha256(bytes(b ^ 0x5C for b in key)))


def _mac(pads, msg: bytes):
    """HMAC-SHA256 of `msg` from a key's `_pads`: the hash object of the outer pass."""
    inner_pad, outer_pad = pads
    inner = inner_pad.copy()
    inner.update(msg)
    outer = outer_pad.copy()
    outer.update(inner.digest())
    return outer


def message(*parts: object) -> bytes:
    """The bytes a derivation authenticates: str(part) joined by SEP, UTF-8."""
    if not parts:
        raise ValueError("a derivation needs at least one message part")
    return SEP.join(map(str, parts)).encode("utf-8")


def digest(key: bytes, *parts: object) -> bytes:
    """HMAC-SHA256(key, message(*parts)): the 32-byte MAC."""
    return _mac(_pads(bytes(key)), message(*parts)).digest()


def hex_digest(key: bytes, *parts: object, chars: int | None = None) -> str:
    """The MAC as lowercase hex, truncated to `chars` characters when given."""
    text = _mac(_pads(bytes(key)), message(*parts)).hexdigest()
    return text if chars is None else text[:chars]


def hex_digests(key: bytes, messages, chars: int | None = None) -> list[str]:
    """`hex_digest(key, m, chars=chars)` of each one-part message `m`, in one loop (collect
    derives a traj_key per released trajectory: a million calls at Telecom scale)."""
    pads = _pads(bytes(key))
    return [_mac(pads, message(m)).hexdigest()[:chars] for m in messages]


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
