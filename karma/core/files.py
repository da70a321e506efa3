"""Users' files in and out: read with one-line errors for what cannot be read or parsed, written whole or
not at all, so that a half-written output is never left behind (CLI, MPI entry points)."""

from __future__ import annotations

import json
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


def read_text(path, kind: str) -> str:
    """The text of a user's file; missing, a directory, unreadable, empty or not UTF-8 is one KarmaError line."""
    path = Path(path)
    if not path.exists():
        raise KarmaError(f"{kind} file not found: {path}")
    if path.is_dir():
        raise KarmaError(f"{path}: is a directory, not a {kind} file")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise KarmaError(f"{path}: cannot read the {kind} file ({err.strerror or err})") from None
    if not raw.strip():
        raise KarmaError(f"{path}: empty {kind} file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise KarmaError(f"{path}: not a UTF-8 text file (byte {err.start}), not a {kind} file") from None


def read_json(path, kind: str):
    """The parsed JSON of a user's file; a file read_text refuses or broken JSON is one KarmaError line."""
    try:
        return json.loads(read_text(path, kind))
    except json.JSONDecodeError as err:
        raise KarmaError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
    except RecursionError:
        raise KarmaError(f"{path}: not valid JSON (nested too deeply)") from None
