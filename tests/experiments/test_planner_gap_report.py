"""The planner-gap report (karma/experiments/planner_gap.py) says what keeps a model from issue 12's targets."""

from karma.core.hardware import load
from karma.experiments.planner_gap import COLUMNS, Gap, record


def test_a_seed_missing_the_best_plan_found_blames_the_search():
    gap = Gap("m", times=[1.0, 1.01], seconds=[1.0, 2.0], reference=1.0, bound=0.99)
    assert gap.gaps()[1] > 0.5
    assert gap.blame() == "search"


def test_a_seed_over_the_bound_target_where_the_best_plan_is_not_blames_the_search():
    """Megatron-1.2B, 2026-12-05: every seed within 0.5% of the long search, seed 0 at 1.0515 of the
    bound where seed 3 found 1.0440."""
    gap = Gap("m", times=[1.79863, 1.78568], seconds=[1.0, 1.0], reference=1.79139, bound=1.71046)
    assert max(gap.gaps()) <= 0.5
    assert gap.blame() == "search"
    within = Gap("m", times=[1.79, 1.78568], seconds=[1.0, 1.0], reference=1.79139, bound=1.71046)
    assert within.blame() == "-"


def test_a_best_plan_far_from_the_bound_blames_the_bound_or_the_plan_space():
    gap = Gap("m", times=[1.0, 1.001], seconds=[1.0, 1.0], reference=1.0, bound=0.9)
    assert gap.blame() == "bound or plan space"
    both = Gap("m", times=[1.0, 1.02], seconds=[1.0, 1.0], reference=1.0, bound=0.9)
    assert both.blame() == "search + bound or plan space"


def test_a_seed_faster_than_the_long_search_is_the_best_found():
    gap = Gap("m", times=[0.98, 1.0], seconds=[1.0, 1.0], reference=1.0, bound=0.97)
    assert gap.best() == 0.98 and gap.blame() == "-"


def test_the_row_has_every_column_and_labels_its_source():
    gap = Gap("m", times=[1.0, 1.01], seconds=[1.0, 3.0], reference=1.0, bound=0.95)
    row = record(gap, [0, 1], load("v100-abci"))
    assert list(row) == COLUMNS
    assert row["seeds_within_target"] == "1/2" and row["planning_cpu_s_median"] == "2.0"
    assert row["source"].startswith("simulated on v100-abci")
