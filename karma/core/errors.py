"""One exception type for every mistake a user can make on input, and the checks that raise it.

The CLI and the pipeline scripts print such errors as a single line (no
traceback), so the message must name the bad value and the valid choices.
Every file a user gives is read through `read_text` (missing, a directory,
unreadable, not UTF-8: one line) and every number in it through `number`
(type, finiteness and range in one place).
"""

from __future__ import annotations

import math
import numbers


class KarmaError(ValueError):
    """Bad user input: unknown name, malformed file, impossible request."""


def choose(kind: str, name: str, valid, context: str = "") -> None:
    """Raise a KarmaError naming the valid choices when `name` is not one of them."""
    valid = sorted(valid)
    if not isinstance(name, str) or name not in valid:
        shown = f"'{name}'" if isinstance(name, str) else repr(name)
        raise KarmaError(f"unknown {kind} {shown}{context}; valid: {', '.join(valid)}")


def number(value, name: str, *, positive: bool = False, integer: bool = False, signed: bool = False,
           optional: bool = False):
    """`value` if it is a finite number (an `int` if `integer`; never a bool) that is >= 0 (> 0 if
    `positive`, any sign if `signed`), or None if `optional`; else a KarmaError naming field `name`.
    The one check of every number read from a user's file or command line."""
    if optional and value is None:
        return None
    kind = int if integer else numbers.Real  # int: what JSON writes back (numpy's integers are not)
    try:
        ok = isinstance(value, kind) and not isinstance(value, bool) and math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        ok = False
    if ok and not signed:
        ok = value > 0 if positive else value >= 0
    if not ok:
        noun = "an integer" if integer else "a finite number"
        want = noun if signed else (f"{noun} >= 1" if integer else "a positive number") if positive else f"{noun} >= 0"
        raise KarmaError(f"field '{name}' must be {want}{' or null' if optional else ''}, got {value!r:.60}")
    return value


def finite_everywhere(data, name: str) -> None:
    """Every float in a nested mapping or list (a YAML config) is finite: JSON schemas let
    `.nan` through `minimum` and `.inf` through `exclusiveMinimum`."""
    if isinstance(data, dict):
        for key, value in data.items():
            finite_everywhere(value, f"{name}: {key}")
    elif isinstance(data, list):
        for k, value in enumerate(data):
            finite_everywhere(value, f"{name}[{k}]")
    elif isinstance(data, float) and not math.isfinite(data):
        raise KarmaError(f"'{name}' must be a finite number, got {data!r}")


def text(value, name: str) -> str:
    """`value` if it is a string, else a KarmaError naming field `name`."""
    if not isinstance(value, str):
        raise KarmaError(f"field '{name}' must be a string, got {value!r:.60}")
    return value
