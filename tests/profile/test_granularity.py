"""`--granularity auto` (issue 16 item 2): blocks cut into layers exactly where a block's backward alone
exceeds the capacity, the others kept whole; the mixed chain computes and trains like the original model."""

import copy

import pytest
import torch

from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.plan.plan import from_policies
from karma.profile.build import make_profile
from karma.profile.granularity import AUTO_NOTE, blocks_to_split
from models import build
from models.registry import build_original, chain_of
from tests.models.test_layer_units import assert_computes_the_original
from tests.runtime.test_runtime import train_both

HW = load("v100-abci")


@pytest.mark.parametrize("name, split", [("resnet50", {"stem", "layer2_0"}), ("resnet1001", {"stage1_0"}),
                                         ("megatron-1.2b", {"layer1"}), ("wrn28-10", {"head"}),
                                         ("vgg16", {"conv2", "fc1"})])
def test_a_mixed_chain_computes_the_original_model(name, split):
    original = build_original(name, "tiny")
    block = chain_of(name, "tiny", copy.deepcopy(original))
    mixed = chain_of(name, "tiny", copy.deepcopy(original), split=frozenset(split))
    layers = len(chain_of(name, "tiny", copy.deepcopy(original), granularity="layer"))
    assert len(block) < len(mixed) < layers or split == {"head"}
    # every layer of a cut block, in order, and the other blocks whole (no naming rule: VGG's layers are features_i)
    assert [n for n in mixed.unit_names if n in block.unit_names] == [n for n in block.unit_names if n not in split]
    assert mixed.granularity == "mixed"
    assert_computes_the_original(original, block, mixed)


@pytest.mark.parametrize("labels", [["swap"] * 3 + ["recompute"] * 6 + ["keep"] * 99,
                                    ["recompute", "swap"] * 60])
def test_a_plan_of_a_mixed_chain_trains_exactly_like_plain_pytorch(labels):
    split = frozenset({"stem", "layer1_0"})
    n = len(build("resnet50", "tiny", device="meta", split=split))
    plan = from_policies("resnet50", 2, labels[:n], segments=[2, 5], checkpoint="host", prefetch_depth=1,
                         weights="streamed")
    ref, run, _ = train_both("resnet50", plan, steps=2, split=split)
    for (key, a), b in zip(ref.units.state_dict().items(), run.units.state_dict().values(), strict=True):
        assert torch.equal(a, b), key


def test_a_split_naming_no_block_is_refused():
    with pytest.raises(KarmaError, match="no block units named"):
        build("resnet50", "tiny", device="meta", split=frozenset({"layer9_0"}))
    with pytest.raises(KarmaError, match="granularity 'block'"):
        build("resnet50", "tiny", device="meta", granularity="layer", split=frozenset({"stem"}))


def test_auto_cuts_exactly_the_blocks_whose_backward_alone_exceeds_the_memory():
    blocks = make_profile("resnet50", "paper", 1440, "analytic", "v100-abci")
    floors = dict(zip((u.name for u in blocks.units), blocks.unit_floors(), strict=True))
    split = blocks_to_split(blocks, HW.device_memory)
    assert 0 < len(split) < len(blocks.units)
    assert min(floors[name] for name in split) > HW.device_memory
    auto = make_profile("resnet50", "paper", 1440, "analytic", "v100-abci", granularity="auto")
    layers = make_profile("resnet50", "paper", 1440, "analytic", "v100-abci", granularity="layer")
    # the kept blocks, in order, and the cut ones' layers in their place
    assert [u.name for u in auto.units if u.name in floors] == [u.name for u in blocks.units if u.name not in split]
    assert len(blocks.units) < len(auto.units) < len(layers.units)
    assert AUTO_NOTE in auto.note and "layer1_0" in auto.note
    # no unit of the mixed chain is a block whose backward alone exceeds the memory
    assert all(floor <= HW.device_memory for u, floor in zip(auto.units, auto.unit_floors(), strict=True)
               if u.name in floors)


def test_auto_at_the_paper_batch_is_the_block_profile():
    blocks = make_profile("resnet50", "paper", None, "analytic", "v100-abci")
    auto = make_profile("resnet50", "paper", None, "analytic", "v100-abci", granularity="auto")
    assert auto.units == blocks.units
    assert "none cut" in auto.note


def test_auto_needs_an_analytic_profile():
    with pytest.raises(KarmaError, match="analytic"):
        make_profile("resnet50", "tiny", None, "measured", "cpu", granularity="auto")
