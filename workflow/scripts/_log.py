"""Route a script's output to its rule's log and turn user errors into one line."""

from __future__ import annotations

import contextlib
import os
import sys
import time

from karma.core.errors import KarmaError


@contextlib.contextmanager
def logged(snakemake):
    """stdout/stderr to snakemake.log[0]; a KarmaError ends the job with its one-line message.

    A job that measures nothing (no `measuring` resource) runs at the lowest CPU priority: beside a measured
    job it takes the core that job leaves to the emulated link's copies, and the copies still run the moment
    they are due (docs/machine.md)."""
    if not getattr(snakemake.resources, "measuring", 0):
        os.nice(19)
    with open(snakemake.log[0], "w", buffering=1) as log, contextlib.redirect_stdout(log), \
            contextlib.redirect_stderr(log):
        start = time.perf_counter()
        try:
            yield log
        except KarmaError as err:
            print(f"error: {err}")
            sys.exit(1)
        print(f"done in {time.perf_counter() - start:.1f} s")
