"""The reach page's granularity case (karma/reach_granularity.py): KARMA at block, layer and auto units."""

import math

import pandas as pd

from karma.hardware import load
from karma.reach_granularity import GRANULARITIES, granularity_rows, incore_throughput, markdown

HW = load("v100-abci")


def test_every_granularity_is_planned_and_compared_with_in_core():
    rows = granularity_rows("resnet50", 2, HW, incore_samples_per_s=10.0, size="tiny", log=lambda _: None)
    assert list(rows.granularity) == list(GRANULARITIES)
    block, layer, auto = (rows[rows.granularity == g].iloc[0] for g in GRANULARITIES)
    assert block.units < layer.units and auto.units == block.units  # everything fits: nothing cut
    assert "none cut" in auto.note
    for r in (block, layer, auto):
        assert r.vs_incore == r.samples_per_s / 10.0 == 2 / r.time_s / 10.0
        assert r.peak_GB <= HW.device_memory / 1e9
    assert "| granularity" in markdown(rows, HW) and "55%" in markdown(rows, HW)


def test_a_granularity_where_nothing_fits_says_so(monkeypatch):
    from karma import reach_granularity
    from karma.errors import KarmaError

    def no_plan(*_args, **_kwargs):
        raise KarmaError("no plan fits in 16.000 GB; the most frugal plan found needs 32.370 GB")

    monkeypatch.setattr(reach_granularity, "plan", no_plan)
    rows = granularity_rows("resnet50", 2, HW, incore_samples_per_s=10.0, size="tiny", log=lambda _: None)
    assert rows.time_s.isna().all() and rows.note.str.contains("no plan fits").all()


def test_in_core_throughput_is_the_block_chains():
    table = pd.DataFrame([
        {"model": "resnet50", "strategy": "incore", "granularity": "block", "samples_per_s": 368.9},
        {"model": "resnet50", "strategy": "incore", "granularity": "layer", "samples_per_s": 376.7},
        {"model": "resnet50", "strategy": "karma", "granularity": "block", "samples_per_s": 225.4},
    ])
    assert incore_throughput(table, "resnet50") == 368.9
    assert math.isnan(incore_throughput(table, "vgg16"))
