"""Bring your own model (models/specs.py, models/auto_chain.py): torchvision and transformers models
become chains that train under any plan exactly as plain PyTorch trains the original module, and
whose simulated peak is the runtime's within 5% (as tests/runtime/test_runtime.py checks for the zoo)."""

import functools
import math

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from karma.cli.main import main
from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.plan.plan import from_policies
from karma.profile.analytic import analytic_profile
from karma.runtime.emulation import run_steps
from karma.runtime.execute import make_optimizer, scaled, train_step
from karma.runtime.ledger import Ledger
from karma.runtime.link import EmulatedLink
from karma.runtime.streamed import HostWeights
from karma.sim.simulate import simulate
from models.specs import build_pair, parse_set
from tests.fuzz import examples

IMAGES = {"input": "3x32x32", "set": {"num_classes": 10}}
#: Six torchvision families (residual, inverted residual, dense blocks, squeeze-excitation with
#: stochastic depth, fire modules, channel shuffle), three transformers types, and graphs whose
#: boundaries carry several tensors (models/auto_chain.py): two encoder-decoders, a U-Net, a
#: segmentation model whose auxiliary head reads the backbone's third stage, a long residual.
SPECS = {
    "torchvision:resnet18": {**IMAGES, "units": 5},  # merged: more pieces than units
    "torchvision:mobilenet_v2": IMAGES,
    "torchvision:densenet121": IMAGES,
    "torchvision:efficientnet_b0": IMAGES,
    "torchvision:squeezenet1_1": {"input": "3x64x64", "set": {"num_classes": 10}},
    "torchvision:shufflenet_v2_x0_5": IMAGES,
    # more pieces than units: merged units train exactly too
    "hf:gpt2": {"set": {"n_layer": 3, "n_embd": 32, "n_head": 2, "vocab_size": 96, "n_positions": 16}, "seq": 16,
                "units": 4},
    "hf:bert": {"set": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
                        "num_attention_heads": 2, "vocab_size": 96, "max_position_embeddings": 16}, "seq": 16},
    "hf:llama": {"set": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
                         "num_key_value_heads": 1, "vocab_size": 96, "max_position_embeddings": 16,
                         # with dropout 0 a real CPU runs sdpa's fused kernel, which saves less than the math
                         # path the meta device counts (docs/machine.md): 9% over the runtime's peak
                         "attention_dropout": 0.1}, "seq": 16},
    # its embedding is tied to the head as well: one Parameter read by three units, trained bitwise
    "hf:t5": {"set": {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 2, "d_kv": 16,
                      "vocab_size": 96}, "seq": 16},
    "hf:bart": {"set": {"d_model": 32, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "encoder_layers": 2,
                        "decoder_layers": 2, "encoder_attention_heads": 2, "decoder_attention_heads": 2,
                        "vocab_size": 96, "max_position_embeddings": 32},
                "seq": 16, "units": 24},
    "examples.unet:unet": {"set": {"width": 16, "resolution": 16, "mults": [1, 2], "blocks": 1}, "units": 30},
    "torchvision:fcn_resnet50": {"input": "3x32x32", "set": {"num_classes": 5}},
    "examples.own_model:long_skip": {},
}
BATCH = 2
SETTINGS = settings(max_examples=examples(1), deadline=None, suppress_health_check=list(HealthCheck), database=None,
                    phases=[Phase.generate])


@functools.cache
def built(spec: str, device: str = "cpu", copy: int = 0):
    """(original, chain, its initial state) built once per spec: examples restore the state."""
    original, chain = build_pair(spec, BATCH, device, seed=3, options=SPECS[spec])
    state = {k: v.clone() for k, v in original.state_dict().items()} if device != "meta" else None
    return original, chain, state


def fresh(spec: str, copy: int):
    original, chain, state = built(spec, "cpu", copy)
    original.load_state_dict(state)
    for p in original.parameters():
        p.grad = None
    return original, chain


@st.composite
def plans(draw, n: int, name: str, copies: bool = True):
    labels = draw(st.lists(st.sampled_from(["keep", "swap", "recompute"] if copies else ["keep", "recompute"]),
                           min_size=n, max_size=n))
    segments = draw(st.lists(st.integers(0, n - 1), max_size=3))
    if not copies:
        return from_policies(name, BATCH, labels, segments=segments)
    return from_policies(name, BATCH, labels, segments=segments, checkpoint=draw(st.sampled_from(["device", "host"])),
                         prefetch_depth=draw(st.integers(1, 3)),
                         weights=draw(st.sampled_from(["resident", "streamed"])))


@pytest.mark.parametrize("spec", list(SPECS))
@SETTINGS
@given(data=st.data())
def test_any_plan_trains_an_automatic_chain_exactly_like_the_original(spec, data):
    """Plain PyTorch on the original module against its chain under a random plan: bitwise equal weights
    and buffers after two steps (dropout, BatchNorm statistics, tied GPT-2 head included). Without
    oneDNN: its depthwise convolution backward differs run to run in plain PyTorch too (MobileNetV2)."""
    ref, ref_chain = fresh(spec, 0)
    orig, chain = fresh(spec, 1)
    plan = data.draw(plans(len(chain), chain.name))
    opt_ref = make_optimizer(ref_chain)
    with torch.backends.mkldnn.flags(enabled=False), EmulatedLink(1e12, 1e12) as link:
        opt = HostWeights(chain, plan, link=link) if plan.host_optimizer else make_optimizer(chain)
        try:
            for s in range(2):
                batch = chain.make_batch(seed=s)
                torch.manual_seed(1000 + s)
                opt_ref.zero_grad()
                scaled(opt_ref, ref_chain.loss(ref(batch[0]), batch[1])).backward()
                opt_ref.step()
                torch.manual_seed(1000 + s)
                train_step(chain, plan, opt, batch, Ledger(math.inf), link, track=False)
            if isinstance(opt, HostWeights):
                opt.sync()
        finally:
            if isinstance(opt, HostWeights):
                opt.close()
    for (key, a), b in zip(ref.state_dict().items(), orig.state_dict().values(), strict=True):
        assert torch.equal(a, b), (key, plan.policies())


@pytest.mark.parametrize("spec", list(SPECS))
@SETTINGS
@given(data=st.data())
def test_the_simulator_predicts_an_automatic_chains_peak_within_5_percent(spec, data):
    _, meta_chain, _ = built(spec, "meta")
    _, chain = fresh(spec, 1)
    assert len(meta_chain) == len(chain)
    plan = data.draw(plans(len(chain), chain.name, copies=False))
    hw = load("v100-abci")
    predicted = simulate(analytic_profile(meta_chain, hw), plan, hw, capacity=math.inf).peak_bytes
    measured = run_steps(chain, plan, math.inf, 1e9, 1)[0].peak_bytes
    assert measured == pytest.approx(predicted, rel=0.05), plan.policies()


def test_units_merges_to_about_n_units_sharing_the_originals_weights():
    original, chain = build_pair("torchvision:resnet18", BATCH, "meta", options={**IMAGES, "units": 4})
    assert len(chain) == 4
    assert {id(p) for p in chain.units.parameters()} == {id(p) for p in original.parameters()}


def test_a_tied_head_is_one_parameter_in_two_units():
    original, chain = build_pair("hf:gpt2", BATCH, "meta", options=SPECS["hf:gpt2"])
    first, last = list(chain.units)[0], list(chain.units)[-1]
    assert {id(p) for p in first.parameters()} & {id(p) for p in last.parameters()}
    assert chain.parameter_count() == sum(p.numel() for p in original.parameters())


@pytest.mark.parametrize("spec, words", [
    ("torchvision:resnet", "unknown torchvision classification or segmentation model"),
    ("hf:no-such-type", "hf:no-such-type"),
    ("not a spec:x", "is none of"),
])
def test_what_cannot_be_a_chain_is_refused_in_one_line(spec, words, capsys):
    assert main(["profile", spec, "--batch", "2", "--out", "/dev/null/x.json"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err


def test_a_users_function_profiles_and_plans(tmp_path, capsys):
    profile, plan = tmp_path / "p.json", tmp_path / "plan.json"
    assert main(["profile", "examples.own_model:mlp", "--batch", "64", "--set", "depth=4", "width=256",
                 "--out", str(profile)]) == 0
    assert main(["plan", str(profile), "--capacity-gb", "0.05", "--out", str(plan)]) == 0
    assert "examples.own_model:mlp batch 64" in capsys.readouterr().out
    with pytest.raises(KarmaError, match="key=value"):
        parse_set(["depth"])
