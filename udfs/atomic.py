"""Atomic file replacement: the one home of "write a temp file, fsync, os.replace".

What it holds: `atomic_open(path)`, a context manager yielding a file object on a temporary
file in `path`'s folder; when the block ends without an exception the data is flushed and
fsynced and the temporary file replaces `path` in one `os.replace`; on any exception (or
BaseException: KeyboardInterrupt, an injected crash) the temporary file is removed and `path`
is left as it was. A reader therefore sees the previous complete file or the new one, never a
half-written one (os.replace is atomic on POSIX within one file system). The file is created by
`tempfile.mkstemp`, so it has mode 0600 (owner only) and is never shared with a concurrent
writer. A process killed inside the block leaves its temporary file behind (named
`<prefix>XXXX.tmp`, default prefix `.<name>-`), never a torn `path`.

Why one home: checkpoints (models/checkpoint.py), the training artefacts (models/distributed.py)
and the catalog root marker (jobs/spark/relocation.py) each had their own copy of this
sequence; the order (flush, fsync, then replace, and cleanup on failure) is what makes the
write crash-safe, so it is written once, in the lowest layer every writer can import.
Pure stdlib.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


@contextmanager
def atomic_open(path: str | os.PathLike, *, binary: bool = False,
                prefix: str | None = None) -> Iterator[IO[Any]]:
    """Open a temporary sibling of `path` for writing; on success it atomically becomes `path`.

    `binary`: a bytes file object (for torch.save); else text, UTF-8. `prefix`: the temporary
    file's name prefix (default `.<name>-`). The parent folder is created when missing.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}-" if prefix is None else prefix,
                               suffix=".tmp", dir=path.parent)
    try:
        with (os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")) as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
