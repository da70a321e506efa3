"""The map of the fourth claim (karma/experiments/nlp_map.py): where KARMA's data parallel beats Megatron."""

import math

import pandas as pd
import pytest

from karma.core.hardware import load
from karma.experiments.nlp_map import map_rows, region

GRID = [1, 2, 4, 8, 16]


def grid(ratios: dict[int, list[float | None]]) -> pd.DataFrame:
    """A map of one model: {batch: one ratio per node count of GRID (None: one side does not fit)}."""
    return pd.DataFrame([{"batch_per_gpu": b, "nodes": n, "karma_over_best_mp": math.nan if r is None else r}
                         for b, row in ratios.items() for n, r in zip(GRID, row, strict=True)])


def test_the_region_names_each_batch_and_its_runs_of_node_counts():
    table = grid({1: [0.5, 0.6, 0.7, 0.8, 0.9], 2: [1.1, 1.2, 0.9, 1.3, None], 4: [1.5] * 5})
    assert region(table, GRID) == ("8 of 14 points (7 by more than the calibration's 15%): batch 2: 1-2, 8 nodes; "
                                   "batch 4: every node count")


def test_a_claim_that_holds_nowhere_says_so():
    assert region(grid({1: [0.5] * 5, 2: [0.9] * 5}), GRID) == "nowhere (10 points compared)"
    assert region(grid({1: [None] * 5}), GRID).startswith("not compared")


@pytest.mark.slow
def test_the_map_plans_karma_at_every_batch_and_compares_it_at_every_node_count():
    """Megatron-LM 2.5B in fp16 on v100-abci at per-GPU batch 1 and 2 on 1 and 4 nodes: a ratio wherever both
    fit, each KARMA's own plan at that batch; the map stops at max_batch."""
    lines = []
    table = map_rows("megatron-2.5b", "fp16", load("v100-abci"), [1, 4], 2, progress=lines.append)
    assert list(table.batch_per_gpu) == [1, 1, 2, 2] and list(table.nodes) == [1, 4, 1, 4]
    ok = table[table.status == "ok"]
    assert len(ok) and (ok.karma_over_best_mp == ok.karma_sequences_per_s / ok.best_mp_sequences_per_s).all()
    assert table.karma_plan.nunique() == 2  # planned anew at each batch
    assert lines[-1] == "megatron-2.5b fp16: batch 2 per GPU done"
