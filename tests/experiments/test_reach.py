"""Reach (karma/experiments/reach.py): the search finds the last batch that fits, throughputs are ratios of one run."""

import fnmatch
import math
import tomllib
from dataclasses import replace
from functools import cache
from pathlib import Path

import pandas as pd
import pytest
import torch

from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.experiments.reach import (
    Batches,
    fits,
    largest_batch,
    lerp,
    model_reach,
    reach_table,
    search,
    spec_batches,
    zoo_batches,
)
from karma.report.reach_figure import reach_figure
from karma.report.reach_report import markdown, published
from karma.sim.simulate import in_core_peak_bytes

ROOT = Path(__file__).resolve().parents[2]
V100 = load("v100-abci")


@pytest.mark.parametrize("guess", [None, 1, 5, 36, 37, 38, 60, 100])
def test_largest_batch_is_the_last_that_fits_from_any_guess(guess):
    calls = []

    def fits_(b):
        calls.append(b)
        return b <= 37

    assert largest_batch(fits_, 100, guess) == 37
    assert 37 in calls and 38 in calls  # both edges were asked, not inferred
    assert len(calls) == len(set(calls))  # each batch asked once


def test_largest_batch_at_the_limit_and_when_nothing_fits():
    assert largest_batch(lambda b: True, 64) == 64
    assert largest_batch(lambda b: True, 64, guess=500) == 64
    assert largest_batch(lambda b: False, 64) is None
    assert largest_batch(lambda b: False, 64, guess=40) is None
    assert largest_batch(lambda b: b == 1, 64, guess=40) == 1
    with pytest.raises(ValueError):
        largest_batch(lambda b: True, 0)


@cache
def tiny():
    """Tiny ResNet-1001 profiles (CIFAR-sized; tiny ResNet-50 cannot run batch 1), and a device whose
    memory holds about 20 samples in core."""
    batches = zoo_batches("resnet1001", V100, size="tiny")
    one, two = in_core_peak_bytes(batches.exact(1)), in_core_peak_bytes(batches.exact(2))
    return batches, replace(V100, device_memory=one + 19.5 * (two - one))


def exact_fits(strategy, batch, work=1.0):
    batches, hw = tiny()
    return fits(strategy, batches.exact(batch), hw, hw.device_memory, work)


def test_surrogate_is_exact_where_profiled_and_linear_between():
    batches, _ = tiny()
    a, c = batches.exact(1), batches.exact(2)
    assert batches.approx(2) is c
    assert lerp(a, c, 1).units == a.units
    three = lerp(a, c, 3)
    assert three.batch == 3
    assert three.units[0].output_bytes == 3 * a.units[0].output_bytes  # activation bytes: linear in the batch
    assert three.units[0].param_bytes == a.units[0].param_bytes  # weights: the same at every batch


def test_in_core_reach_is_the_largest_batch_whose_in_core_plan_fits():
    batches, hw = tiny()
    reach, note = search("incore", batches, hw, hw.device_memory, limit=1000)
    assert reach and not note
    assert exact_fits("incore", reach) and not exact_fits("incore", reach + 1)
    assert 10 <= reach <= 30  # the device was sized for about 20


def test_a_baseline_reaches_further_and_the_next_batch_does_not_fit():
    batches, hw = tiny()
    incore, _ = search("incore", batches, hw, hw.device_memory, limit=1000)
    reach, _ = search("checkpoint", batches, hw, hw.device_memory, limit=1000)
    assert reach > incore
    assert exact_fits("checkpoint", reach) and not exact_fits("checkpoint", reach + 1)


def test_karma_reach_fits_and_the_next_batch_does_not_at_full_budget():
    batches, hw = tiny()
    reach, _ = search("karma", batches, hw, hw.device_memory, limit=1000)
    assert exact_fits("karma", reach, work=1.0)
    assert not exact_fits("karma", reach + 1, work=1.0)


@cache
def rows():
    batches, hw = tiny()
    return pd.DataFrame(model_reach("resnet1001", batches, hw, ["incore", "checkpoint", "zero-infinity"],
                                    multiples=(1, 2), limit_factor=8, log=lambda _: None))


def test_rows_relative_throughputs_are_ratios_of_one_run():
    table = rows().set_index("strategy")
    incore = table.loc["incore"]
    assert incore.reach_batch == incore.incore_batch
    assert incore.vs_incore == pytest.approx(1.0) and incore.vs_incore_1x == pytest.approx(1.0)
    assert math.isnan(incore.vs_incore_2x)  # beyond in-core's reach
    for name, r in table.iterrows():
        assert r.samples_per_s == pytest.approx(r.reach_batch / r.time_s)
        assert r.vs_incore == pytest.approx(r.samples_per_s / incore.samples_per_s), name
        assert r.reach_over_incore == pytest.approx(r.reach_batch / incore.incore_batch)
        assert r.limit_batch == 8 * incore.incore_batch
        assert r.limit_hit == (r.reach_batch >= r.limit_batch)
        assert "simulated" in r.source
    assert table.loc["checkpoint"].reach_batch > incore.reach_batch


def test_limit_hit_is_said():
    batches, hw = tiny()
    big = replace(hw, device_memory=hw.device_memory * 100)
    table = pd.DataFrame(model_reach("resnet1001", batches, big, ["incore", "zero-infinity"], multiples=(1,),
                                     limit_factor=2, log=lambda _: None)).set_index("strategy")
    assert table.loc["zero-infinity"].limit_hit and "limit hit" in table.loc["zero-infinity"].note


def test_no_in_core_reference_when_in_core_does_not_fit_at_batch_1():
    batches, hw = tiny()
    small = replace(hw, device_memory=in_core_peak_bytes(batches.exact(1)) * 0.9)
    table = pd.DataFrame(model_reach("resnet1001", batches, small, ["incore", "zero-infinity"], multiples=(1,),
                                     limit_factor=4, log=lambda _: None)).set_index("strategy")
    assert pd.isna(table.loc["incore"].reach_batch) and table.loc["incore"].limit_batch == 4
    assert table.vs_incore.isna().all() and "does not fit even at batch 1" in table.loc["zero-infinity"].note


def test_surrogate_interpolates_between_the_nearest_exact_profiles():
    calls = []

    def make(batch):
        calls.append(batch)
        return replace(tiny()[0].exact(1), batch=batch)

    b = Batches(make)
    b.exact(1), b.exact(10), b.exact(100)
    assert b.approx(10) is b.exact_profiles[10] and b.approx(50).batch == 50 and b.approx(500).batch == 500
    assert calls == [1, 10, 100]  # approx never profiles


def test_published_rows_have_a_source_and_the_package_ships_them():
    theirs = published()
    assert list(theirs.columns[:7]) == ["system", "model", "batch", "batch_over_incore", "device", "memory_GB",
                                        "throughput_vs_incore"]
    assert theirs.source.notna().all() and theirs.claim.notna().all()
    hayakawa = theirs[theirs.source.str.contains("2010.14109")].iloc[0]
    assert (hayakawa.model, hayakawa.batch, hayakawa.throughput_vs_incore) == ("ResNet-50", 1440, 0.55)
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["karma"]
    assert any(fnmatch.fnmatch("data/published_reach.csv", pattern) for pattern in data)


def test_markdown_says_simulated_and_their_hardware(tmp_path):
    batches, hw = tiny()
    text = markdown(rows(), published(), hw)
    assert "simulated" in text and "their systems on their hardware" in text and "2010.14109" in text
    reach_figure(rows(), published(), hw.name, tmp_path / "reach.png")
    assert (tmp_path / "reach.png").stat().st_size > 10_000


@pytest.mark.slow  # an end-to-end run of 9-15 s: CI's slow step (README, Tests and CI)
def test_a_model_spec_is_searched_with_its_units_cut_once():
    """A U-Net (models/auto_chain.py cuts it at boundaries of several tensors) keeps its units at every batch,
    so the search's plans carry from one batch to another; the batch past each reach does not fit."""
    hw = replace(load("v100-abci"), device_memory=0.4e9)
    unet = {"name": "tiny-unet", "spec": "examples.unet:unet", "batch": 4,
            "options": {"set": {"width": 16, "resolution": 32, "mults": [1, 2], "blocks": 1}}}
    table = reach_table([], hw, ["checkpoint", "karma"], own_models=[unet], limit_factor=8, log=lambda _: None)
    assert list(table.model.unique()) == ["tiny-unet"] and list(table.strategy) == ["checkpoint", "karma"]
    batches = spec_batches(unet["spec"], unet["options"], hw, batch=4)
    small, large = batches.exact(4), batches.exact(9)
    for a, b in zip(small.units, large.units, strict=True):  # the chain cut at 4 runs at 9 (meta shapes follow)
        assert b.input_bytes * 4 == a.input_bytes * 9, a.name
    for row in table.itertuples():
        assert row.reach_batch and (row.limit_hit or not fits(row.strategy, batches.exact(row.reach_batch + 1), hw,
                                                              hw.device_memory, work=1.0))


def test_a_spec_whose_graph_fixes_its_batch_is_refused_by_the_reach_search():
    with pytest.raises(KarmaError, match="torch.fx"):
        spec_batches("hf:gpt2", {"set": {"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 32,
                                         "n_positions": 8}, "seq": 8}, load("v100-abci"))


def fixed_shape_model():
    """A long residual whose last unit reshapes by the batch size it reads of the input."""

    class Reshaping(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(4))

        def forward(self, x):
            h = x
            for layer in self.layers:
                h = torch.relu(layer(h))
            return (h + x).view(x.size(0), -1)

    def make_batch(batch, device, seed):
        return torch.zeros(batch, 8, device=device), torch.zeros(batch, 8, device=device)

    return Reshaping(), make_batch, torch.nn.functional.mse_loss


def test_a_spec_whose_units_have_the_batch_written_in_is_refused_by_the_reach_search():
    with pytest.raises(KarmaError, match="shapes written in"):
        spec_batches("tests.experiments.test_reach:fixed_shape_model", {}, load("v100-abci"), batch=4)
