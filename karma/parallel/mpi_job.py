"""What every MPI entry point of the suite does the same way: fail loudly, write atomically.

A rank that raises prints one line (``rank R: error: ...``; a KarmaError's own message, else
the exception's last line) and aborts the whole job, so no rank hangs in a collective;
results are written to a temporary file and renamed, so nothing half-written is left.
"""

from __future__ import annotations

import sys
import time
import traceback
from pathlib import Path

from karma.core.errors import KarmaError
from karma.core.files import write_atomically


def abort(comm, err: BaseException) -> int:
    detail = str(err) if isinstance(err, KarmaError) else traceback.format_exc(limit=1).strip().splitlines()[-1]
    print(f"rank {comm.rank}: error: {detail}", file=sys.stderr, flush=True)
    # mpiexec forwards a rank's stderr asynchronously and an abort can tear the forwarder
    # down first, losing the line: give it a moment.
    time.sleep(0.5)
    comm.Abort(1)
    return 1


def write_table(comm, table, out: str | Path) -> int:
    """Rank 0 writes its table (CSV, atomically) and prints it without the source column; every
    rank then waits for the others. Returns the exit status."""
    if comm.rank == 0:
        write_atomically(out, lambda tmp: table.to_csv(tmp, index=False))
        print(table.drop(columns=["source"]).to_string())
    comm.Barrier()
    return 0
