"""Files written whole or not at all: a half-written output is never left behind (CLI, MPI entry points)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from karma.core.errors import KarmaError


def write_atomically(path: str | Path, write: Callable[[Path], None]) -> Path:
    """`write(tmp)`, then rename tmp to `path`; the tmp file never outlives a failure."""
    out = Path(path)
    if out.is_dir():
        raise KarmaError(f"{out}: is a directory; give a file name to write")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        write(tmp)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def write_atomic(path: str | Path, content: str) -> Path:
    """`content` (text) to `path`, whole or not at all."""
    return write_atomically(path, lambda tmp: tmp.write_text(content))
