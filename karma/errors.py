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
