"""Regression tracking: the pipeline's headline numbers against a committed reference.

`collect` reads the tables the pipeline writes and keeps the numbers worth tracking,
each labelled simulated or measured. `compare` checks a new run against the
reference: simulated numbers are deterministic (analytic profiles, seeded planner)
and must match within 1%; measured ones are ratios from one run on a noisy 2-core
machine, within MEASURED_TOLERANCE (FACTS.md: 10-20% run to run; across this
project's runs the measured speedup ratios moved by up to ~15%, so 25% flags real
regressions without flagging noise). A measured number absent from the new run (its
plan hit the capacity that time) is reported, not failed.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from karma.errors import KarmaError

SIMULATED_TOLERANCE = 0.01
MEASURED_TOLERANCE = 0.25


def _read(path: Path) -> pd.DataFrame:
    if not path.exists():
        raise KarmaError(f"missing {path}: run the pipeline first (snakemake --cores all)")
    return pd.read_csv(path)


def collect(results: str | Path) -> pd.DataFrame:
    """One row per tracked number: metric, value, kind (simulated or measured)."""
    results = Path(results)
    rows = []
    speedups = _read(results / "tables" / "speedups.csv")
    for r in speedups.itertuples():
        if r.status == "ok":
            rows.append((f"speedups/{r.model}/{r.strategy}/time_s", r.time_s, "simulated"))
            if r.strategy == "karma":
                rows.append((f"speedups/{r.model}/karma/time_over_bound", r.time_over_bound, "simulated"))
    scaling = _read(results / "tables" / "scaling.csv")
    top = scaling[scaling.gpus == scaling.gpus.max()]
    for r in top.itertuples():
        rows.append((f"scaling/{r.model}/{r.strategy}/efficiency_at_{int(r.gpus)}", r.efficiency, "simulated"))
    runtime = _read(results / "tables" / "measured_vs_predicted.csv")
    for r in runtime.itertuples():
        if isinstance(r.status, str) and r.status == "ok" and r.strategy != "karma":
            rows.append((f"runtime/{r.model}/{r.strategy}/karma_speedup_measured", r.karma_speedup_measured,
                         "measured"))
    dp = _read(results / "tables" / "distributed_validation.csv")
    for r in dp[dp.order == "pipelined"].itertuples():
        rows.append((f"distributed/{r.model}/naive_over_pipelined_measured", r.naive_over_pipelined_measured,
                     "measured"))
    nlp = _read(results / "tables" / "large_nlp_summary.csv")
    for r in nlp.itertuples():
        rows.append((f"large_nlp/{r.model}/karma_over_best_mp_geomean", r.karma_over_best_mp_geomean, "simulated"))
    tp = _read(results / "tables" / "tp_validation.csv")
    for r in tp[tp.tp > 1].itertuples():
        rows.append((f"tp_validation/{r.model}/tp_over_dp_measured", r.tp_over_dp_measured, "measured"))
    return pd.DataFrame(rows, columns=["metric", "value", "kind"])


def compare(reference: pd.DataFrame, current: pd.DataFrame) -> pd.DataFrame:
    """Every reference metric with the new value, its relative change and a verdict."""
    merged = reference.merge(current, on=["metric", "kind"], how="left", suffixes=("_reference", "_now"))
    merged["change"] = merged.value_now / merged.value_reference - 1
    merged["tolerance"] = merged.kind.map({"simulated": SIMULATED_TOLERANCE, "measured": MEASURED_TOLERANCE})
    merged["verdict"] = "ok"
    merged.loc[merged.change.abs() > merged.tolerance, "verdict"] = "REGRESSION"
    merged.loc[merged.value_now.isna() & (merged.kind == "simulated"), "verdict"] = "MISSING"
    # A measured run can end in OOM near its capacity when copies are late (the emulated
    # device's timing varies run to run): reported, not a regression of the method.
    merged.loc[merged.value_now.isna() & (merged.kind == "measured"), "verdict"] = "not measured this run"
    return merged
