"""One exception type for every mistake a user can make on input.

The CLI and the pipeline scripts print such errors as a single line (no
traceback), so the message must name the bad value and the valid choices.
"""


class KarmaError(ValueError):
    """Bad user input: unknown name, malformed file, impossible request."""


def choose(kind: str, name: str, valid, context: str = "") -> None:
    """Raise a KarmaError naming the valid choices when `name` is not one of them."""
    valid = sorted(valid)
    if name not in valid:
        raise KarmaError(f"unknown {kind} '{name}'{context}; valid: {', '.join(valid)}")


def read_json(path, kind: str):
    """The parsed JSON of a user's file; a missing or broken file is one KarmaError line."""
    import json
    from pathlib import Path

    path = Path(path)
    if not path.exists():
        raise KarmaError(f"{kind} file not found: {path}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise KarmaError(f"{path}: not valid JSON ({err.msg} at line {err.lineno})") from None
