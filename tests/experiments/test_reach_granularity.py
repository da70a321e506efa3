"""The reach page's granularity case (karma/experiments/reach_granularity.py): KARMA at block, layer and auto units."""

import math

import pandas as pd
import pytest

from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.experiments import reach_granularity
from karma.experiments.reach_granularity import GRANULARITIES, granularity_rows, incore_reference, incore_throughput
from karma.report.reach_report import granularity_markdown as markdown

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


def test_each_precision_is_compared_with_in_core_training_in_that_precision():
    largest32, speed32 = incore_reference("resnet50", HW, "fp32", size="tiny", limit=256)
    largest16, speed16 = incore_reference("resnet50", HW, "fp16", size="tiny", limit=256)
    assert largest32 and largest16 and speed32 > 0 and speed16 > 0
    assert largest16 >= largest32  # 16-bit activations: at least the fp32 batch fits
    rows = granularity_rows("resnet50", 2, HW, speed16, precision="fp16", size="tiny", log=lambda _: None,
                            incore_batch=largest16)
    assert (rows.precision == "fp16").all() and (rows.incore_batch == largest16).all()
    assert (rows.vs_incore == rows.samples_per_s / speed16).all()


def test_in_core_reference_is_none_where_batch_one_does_not_fit(monkeypatch):
    monkeypatch.setattr(reach_granularity, "search", lambda *_args, **_kwargs: (None, ""))
    largest, speed = incore_reference("resnet50", HW, "fp16", size="tiny", limit=64)
    assert largest is None and math.isnan(speed)


@pytest.mark.slow
def test_the_case_takes_the_tables_in_core_reference_in_its_precision_and_searches_the_others(monkeypatch):
    table = pd.DataFrame([{"model": "resnet50", "strategy": "incore", "granularity": "block", "reach_batch": 8,
                           "samples_per_s": 10.0}])
    asked = []
    monkeypatch.setattr(reach_granularity, "incore_reference",
                        lambda model, hw, precision, size: asked.append(precision) or (16, 40.0))
    rows = reach_granularity.case_rows("resnet50", 2, ["fp32", "fp16"], HW, table, "fp32", size="tiny",
                                       log=lambda _: None)
    assert asked == ["fp16"]
    fp32, fp16 = rows[rows.precision == "fp32"], rows[rows.precision == "fp16"]
    assert (fp32.incore_batch == 8).all() and (fp32.incore_samples_per_s == 10.0).all()
    assert (fp16.incore_batch == 16).all() and (fp16.vs_incore == fp16.samples_per_s / 40.0).all()
