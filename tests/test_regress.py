"""Regression tracking: simulated numbers within 1%, measured ratios within 25%."""

import pandas as pd
import pytest

from karma.regress import compare


def table(sim: float, meas: float | None) -> pd.DataFrame:
    rows = [("speedups/m/karma/time_s", sim, "simulated")]
    if meas is not None:
        rows.append(("runtime/m/vdnn/karma_speedup_measured", meas, "measured"))
    return pd.DataFrame(rows, columns=["metric", "value", "kind"])


@pytest.mark.parametrize("sim, meas, verdicts", [
    (1.005, 2.4, ["ok", "ok"]),
    (1.02, 2.0, ["REGRESSION", "ok"]),
    (1.0, 1.4, ["ok", "REGRESSION"]),
    (1.0, None, ["ok", "not measured this run"]),
])
def test_verdicts(sim, meas, verdicts):
    diff = compare(table(1.0, 2.0), table(sim, meas))
    assert list(diff.verdict) == verdicts


def test_a_simulated_number_that_disappears_is_missing():
    current = pd.DataFrame(columns=["metric", "value", "kind"])
    assert list(compare(table(1.0, 2.0), current).verdict)[0] == "MISSING"


def test_cli_exits_nonzero_on_a_regression(tmp_path):
    from karma.cli import main

    results = tmp_path / "results"
    (results / "tables").mkdir(parents=True)
    pd.DataFrame([{"model": "m", "strategy": "karma", "status": "ok", "time_s": 1.0, "time_over_bound": 1.01}]) \
        .to_csv(results / "tables/speedups.csv", index=False)
    pd.DataFrame([{"model": "m", "strategy": "s", "gpus": 8, "efficiency": 0.9}]).to_csv(
        results / "tables/scaling.csv", index=False)
    pd.DataFrame([{"model": "m", "strategy": "vdnn", "status": "ok", "karma_speedup_measured": 2.0}]).to_csv(
        results / "tables/measured_vs_predicted.csv", index=False)
    pd.DataFrame([{"model": "m", "order": "pipelined", "naive_over_pipelined_measured": 1.0}]).to_csv(
        results / "tables/distributed_validation.csv", index=False)
    pd.DataFrame([{"model": "m", "karma_over_best_mp_geomean": 1.3}]).to_csv(
        results / "tables/large_nlp_summary.csv", index=False)
    pd.DataFrame([{"model": "m", "tp": 2, "tp_over_dp_measured": 1.1}]).to_csv(
        results / "tables/tp_validation.csv", index=False)
    reference = tmp_path / "reference.csv"
    assert main(["reference", "--results", str(results), "--out", str(reference)]) == 0
    assert main(["compare", "--results", str(results), "--reference", str(reference)]) == 0
    frame = pd.read_csv(results / "tables/speedups.csv")
    frame.loc[0, "time_s"] = 1.05
    frame.to_csv(results / "tables/speedups.csv", index=False)
    assert main(["compare", "--results", str(results), "--reference", str(reference)]) == 1
