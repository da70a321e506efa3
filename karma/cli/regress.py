"""`karma reference` and `karma compare`: the pipeline's tracked numbers against a committed reference
(karma/report/regress.py holds the verdicts; this is their command line)."""

from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from karma.core.errors import KarmaError
from karma.core.files import read_text, write_atomic
from karma.report.markdown import to_markdown
from karma.report.regress import FAILING, SHOWN, collect, compare, summary


def cmd_reference(args) -> None:
    out = Path(args.out)
    table = collect(args.results)
    write_atomic(out, table.to_csv(index=False))
    print(f"{len(table)} reference numbers ({(table.kind == 'simulated').sum()} simulated, "
          f"{(table.kind == 'measured').sum()} measured) -> {out}")


def read_reference(path):
    """The reference table (karma reference): a CSV with columns metric, kind, value; one line if not."""
    try:
        table = pd.read_csv(io.StringIO(read_text(path, "reference")))
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as err:
        raise KarmaError(f"{path}: not a CSV table ({str(err).splitlines()[0]})") from None
    missing = [c for c in ("metric", "kind", "value") if c not in table.columns]
    if missing:
        raise KarmaError(f"{path}: missing column '{missing[0]}' (karma reference writes the file)")
    if not pd.api.types.is_numeric_dtype(table.value):
        raise KarmaError(f"{path}: column 'value' must hold numbers")
    return table


def cmd_compare(args) -> int:
    if not Path(args.reference).exists():
        raise KarmaError(f"reference file not found: {args.reference} (karma reference writes one)")
    reference, current = read_reference(args.reference), collect(args.results)
    if args.kind:  # e.g. only the simulated numbers: a run elsewhere (Slurm, .ci/slurm) against a local one
        reference, current = reference[reference.kind.isin(args.kind)], current[current.kind.isin(args.kind)]
    diff = compare(reference, current)
    bad = diff[diff.verdict.isin(FAILING)]
    shown = diff if args.all else diff[diff.verdict != "ok"]
    if len(shown):
        print(to_markdown(shown[SHOWN]))
    print(summary(diff))
    if args.out:
        write_atomic(Path(args.out), "# The pipeline's numbers against the reference\n\n" + summary(diff) + "\n\n"
                     + to_markdown(diff[SHOWN]) + "\n")
    return 1 if args.strict and len(bad) else 0
