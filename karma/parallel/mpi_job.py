"""What every MPI entry point of the suite does the same way: fail loudly, write atomically.

A rank that raises prints one line (``rank R: error: ...``; a KarmaError's own message, else
the exception's last line) and aborts the whole job, so no rank hangs in a collective;
results are written to a temporary file and renamed, so nothing half-written is left.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import torch

from karma.core.errors import KarmaError
from karma.core.files import write_atomically

# mpi4py is imported inside the functions that run under MPI: importing it starts MPI.


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


def run_job(parser, train: Callable, report: Callable, argv: list[str] | None = None) -> int:
    """An MPI entry point: one torch thread per rank (docs/machine.md, MPI), the arguments parsed,
    `train(args, comm)` on every rank (a rank that raises aborts the job, `abort`), then
    `report(args, comm, result)` on rank 0 while the others wait."""
    from mpi4py import MPI

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    args = parser().parse_args(argv)
    try:
        result = train(args, comm)
    except Exception as err:  # one line per failing rank, then the whole job ends
        return abort(comm, err)
    if comm.rank == 0:
        report(args, comm, result)
    comm.Barrier()
    return 0

