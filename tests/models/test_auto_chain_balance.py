"""Automatic chains stay balanced (models/auto_chain.py, `_merge`): when a model has more pieces than
the unit target, no unit swallows a run of them. Checked on the analytic profile the planner reads,
for the families the suite supports at several depths, with targets below their piece counts."""

import itertools
import random
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from karma.core.hardware import load
from karma.profile.analytic import analytic_profile
from models.auto_chain import DEFAULT_UNITS, _merge
from models.specs import build_pair
from tests.fuzz import examples

#: A merged unit's forward time and saved bytes are at most this multiple of the chain's mean. The merge
#: bounds both shares of every unit by the least largest share any grouping reaches, near the mean when no
#: piece is heavy; the rest is the granularity of the pieces and the tracer's estimate against the profile.
SPREAD = 3.0
IMAGES = {"input": "3x64x64", "set": {"num_classes": 10}}
GPT2 = {"n_embd": 64, "n_head": 2, "vocab_size": 512, "n_positions": 64}
BERT = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "vocab_size": 512,
        "max_position_embeddings": 64}
LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1,
         "vocab_size": 512, "max_position_embeddings": 64}
#: (spec, options, unit target): every case has more pieces than its target
CASES = [
    ("torchvision:resnet50", IMAGES, 8),
    ("torchvision:resnet152", IMAGES, 16),
    ("torchvision:densenet121", IMAGES, 3),
    ("torchvision:efficientnet_b0", IMAGES, 6),
    ("torchvision:convnext_tiny", IMAGES, 8),
    ("torchvision:vit_b_16", {"input": "3x64x64", "set": {"num_classes": 10, "image_size": 64}}, 8),
    ("hf:gpt2", {"set": {**GPT2, "n_layer": 6}, "seq": 64}, 5),
    ("hf:gpt2", {"set": {**GPT2, "n_layer": 24}, "seq": 64}, 16),
    ("hf:bert", {"set": {**BERT, "num_hidden_layers": 12}, "seq": 64}, 8),
    ("hf:llama", {"set": {**LLAMA, "num_hidden_layers": 4}, "seq": 64}, 3),
    ("hf:llama", {"set": {**LLAMA, "num_hidden_layers": 20}, "seq": 64}, 12),
]


def unbalanced(values: list[float], pieces: list[int]) -> list[int]:
    """Units of several pieces whose value exceeds SPREAD times the mean (a single piece cannot be split)."""
    mean = statistics.fmean(values)
    return [i for i, (v, n) in enumerate(zip(values, pieces, strict=True)) if n > 1 and v > SPREAD * mean]


@pytest.mark.parametrize("spec, options, target", CASES, ids=[f"{s}-{o['set']}-{t}"[:60] for s, o, t in CASES])
def test_merged_units_are_balanced_in_time_and_saved_bytes(spec, options, target):
    original, chain = build_pair(spec, 2, "meta", options={**options, "units": target})
    units = list(chain.units)
    assert len(units) == target
    pieces = [u.pieces for u in units]
    assert sum(pieces) > target, "the case must merge"
    profile = analytic_profile(chain, load("v100-abci"))
    for field in ("forward_time", "saved_bytes"):
        values = [getattr(u, field) for u in profile.units]
        assert not unbalanced(values, pieces), (field, values, pieces)
    # every weight belongs to exactly one unit, or is one Parameter tied across units as in the original
    assert {id(p) for p in chain.units.parameters()} == {id(p) for p in original.parameters()}
    assert chain.parameter_count() == sum(p.numel() for p in original.parameters())


@pytest.mark.slow
def test_a_transformer_of_more_layers_than_the_default_target_stays_balanced():
    """60 layers (124 pieces) merge to DEFAULT_UNITS balanced units: nothing lumps at the end (the tail of
    layers, final norm and head that one unit of GPT-2 XL held)."""
    _, chain = build_pair("hf:gpt2", 2, "meta", options={"set": {**GPT2, "n_layer": 60, "vocab_size": 4096}, "seq": 64})
    pieces = [u.pieces for u in chain.units]
    assert len(pieces) == DEFAULT_UNITS
    profile = analytic_profile(chain, load("v100-abci"))
    for field in ("forward_time", "saved_bytes"):
        values = [getattr(u, field) for u in profile.units]
        assert not unbalanced(values, pieces), (field, values, pieces)


@settings(max_examples=examples(300), deadline=None, derandomize=True)
@given(pairs=st.lists(st.tuples(st.floats(0, 1e3), st.floats(0, 1e3)), min_size=1, max_size=80),
       target=st.integers(1, 100))
def test_the_merge_tiles_the_chain_and_reaches_the_least_largest_load(pairs, target):
    measures = [list(m) for m in zip(*pairs, strict=True)]
    groups = _merge(measures, target)
    m = len(pairs)
    assert len(groups) == min(target, m)
    assert groups[0][0] == 0 and groups[-1][1] == m
    assert all(a < b for a, b in groups) and all(x[1] == y[0] for x, y in zip(groups, groups[1:], strict=False))

    def largest(edges):
        return max(sum(v[a:b]) / (sum(v) or 1) for v in measures for a, b in zip(edges, edges[1:], strict=False))

    best = largest([0, *(b for _, b in groups)])
    # no other grouping into as many groups has a smaller largest load: every one on short chains, else random
    k = len(groups)
    if m <= 10:
        others = itertools.combinations(range(1, m), k - 1)
    else:
        rng = random.Random(m * 101 + target)
        others = (sorted(rng.sample(range(1, m), k - 1)) for _ in range(100))
    for cuts in others:
        assert best <= largest([0, *cuts, m]) + 1e-9


def test_a_heavy_last_piece_does_not_make_its_neighbours_heavier():
    weights = [1.0] * 74 + [20.0]
    sums = [sum(weights[a:b]) for a, b in _merge([weights], 10)]
    assert sums[-1] == 20.0 and max(sums[:-1]) - min(sums[:-1]) <= 1.0, sums
