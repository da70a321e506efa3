"""Mixed precision (karma/core/precision.py): bf16 out-of-core training equals plain bf16 training, the
analytic profile traces autocast's casts on the meta device, and the memory model counts 16-bit
weights with fp32 masters where the optimizer runs."""

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import karma.profile.trace as unit_trace
from karma.cli.main import main
from karma.core.hardware import load
from karma.core.precision import LossScaler, MetaAutocast, MixedPrecisionOptimizer, optimizer_bytes
from karma.core.precision_bytes import master_bytes
from karma.plan.plan import from_policies
from karma.profile.analytic import analytic_profile
from karma.profile.chain import UnitTimes, profile_chain
from karma.profile.profile import Profile
from karma.runtime.emulation import run_steps
from karma.runtime.execute import make_optimizer, scaled, train_step
from karma.runtime.ledger import Ledger
from karma.runtime.link import EmulatedLink
from karma.runtime.streamed import HostWeights
from karma.sim.block_bytes import block_bytes
from karma.sim.simulate import optimizer_traffic_bytes, simulate
from models import build
from tests.fuzz import examples
from tests.runtime.test_runtime import keep_or_recompute_plan

MODELS = ["resnet50", "vgg16", "megatron-1.2b", "wrn28-10"]
SETTINGS = settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck), database=None)


def train_both(name, plan, precision="bf16", steps=2, host_updates=False):
    """Plain mixed-precision training (step_loss under autocast, the fp32-master optimizer) and the
    runtime under `plan`, from the same initial weights and batches."""
    ref = build(name, "tiny", seed=5, precision=precision)
    run = build(name, "tiny", seed=5, precision=precision)
    opt_ref = make_optimizer(ref)
    reports = []
    with EmulatedLink(2e9, 2e9) as link:
        host = plan.weights == "streamed" or host_updates
        opt_run = HostWeights(run, plan, link=link) if host else make_optimizer(run)
        for s in range(steps):
            batch = run.make_batch(seed=s)
            torch.manual_seed(1000 + s)
            opt_ref.zero_grad()
            scaled(opt_ref, ref.step_loss(*batch)).backward()
            opt_ref.step()
            torch.manual_seed(1000 + s)
            reports.append(train_step(run, plan, opt_run, batch, Ledger(math.inf), link))
    if isinstance(opt_run, HostWeights):
        opt_run.sync()
        opt_run.close()
    return ref, run, reports


@st.composite
def plans(draw, policies=("keep", "swap")):
    name = draw(st.sampled_from(MODELS))
    n = len(build(name, "tiny", device="meta"))
    labels = draw(st.lists(st.sampled_from(policies), min_size=n, max_size=n))
    segments = draw(st.lists(st.integers(0, n - 1), max_size=3))
    return name, from_policies(name, 2, labels, segments=segments, prefetch_depth=draw(st.integers(1, 2)),
                               weights=draw(st.sampled_from(["resident", "streamed"])))


@pytest.mark.slow  # real bf16 training of random plans: the recompute case below stays in the fast run
@SETTINGS
@given(plans(), st.booleans())
def test_bf16_out_of_core_training_equals_plain_bf16_training_bitwise(case, host_updates):
    """Keep/swap plans, resident or streamed weights, the optimizer on the device or the host: the
    16-bit weights and BatchNorm statistics after two steps are the same bits."""
    name, plan = case
    ref, run, reports = train_both(name, plan, host_updates=host_updates)
    assert any(p.dtype == torch.bfloat16 for p in run.units.parameters())
    for (key, a), b in zip(ref.units.state_dict().items(), run.units.state_dict().values(), strict=True):
        assert torch.equal(a, b), key
    assert all(math.isfinite(r.loss) for r in reports)


@settings(max_examples=examples(4), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(plans(("keep", "swap", "recompute")))
def test_bf16_recompute_plans_train_like_plain_bf16_training(case):
    """Recompute runs the forward again under the autocast state it first ran in (torch.utils.checkpoint
    restores it): equal to float tolerance (bitwise, in practice)."""
    name, plan = case
    ref, run, _ = train_both(name, plan)
    for (key, a), b in zip(ref.units.state_dict().items(), run.units.state_dict().values(), strict=True):
        assert torch.allclose(a.float(), b.float(), rtol=1e-2, atol=1e-3), key


def test_fp16_loss_scale_skips_an_overflowing_step_and_halves():
    p = torch.nn.Parameter(torch.ones(4, dtype=torch.float16))
    opt = MixedPrecisionOptimizer([p], lambda ms: torch.optim.SGD(ms, lr=0.1), "fp16")
    assert opt.scaler.scale == 2.0 ** 16
    p.grad = torch.tensor([1.0, float("inf"), 1.0, 1.0], dtype=torch.float16)
    opt.step()
    assert torch.equal(p, torch.ones(4, dtype=torch.float16)) and opt.scaler.scale == 2.0 ** 15
    opt.zero_grad()
    p.grad = torch.full((4,), 2.0 ** 15, dtype=torch.float16)  # a gradient of 1 at scale 2^15
    opt.step()
    assert torch.allclose(p.float(), torch.full((4,), 0.9), atol=1e-3)  # 0.9 in fp16
    assert LossScaler("bf16").scaled(torch.tensor(3.0)) == 3.0


def test_fp16_streamed_training_equals_plain_fp16_training():
    """fp16's loss scale with the optimizer on the host: updates wait until every gradient is known
    finite, so skipped steps are skipped for every block, as on the device."""
    plan = from_policies("vgg16", 2, ["swap", "keep"] * 3 + ["swap"], weights="streamed")
    ref, run, _ = train_both("vgg16", plan, precision="fp16", steps=2)
    for (key, a), b in zip(ref.units.state_dict().items(), run.units.state_dict().values(), strict=True):
        assert torch.equal(a, b), key


def trace_bytes(name, device, policy=None):
    chain = build(name, "tiny", device=device, precision="bf16")
    if policy is None:
        return profile_chain(chain, torch.device(device), lambda *a: UnitTimes(1.0, 1.0), "measured", "x", "")
    original = unit_trace.autocast
    unit_trace.autocast = lambda d, p, _policy=None: original(d, p, policy)
    try:
        return profile_chain(chain, torch.device(device), lambda *a: UnitTimes(1.0, 1.0), "analytic", "x", "")
    finally:
        unit_trace.autocast = original


@pytest.mark.parametrize("name", ["resnet50", "vgg16"])
def test_meta_autocast_saves_what_real_autocast_saves(name):
    """MetaAutocast with the CPU's op lists on meta = torch.autocast on this CPU, byte for byte (the
    analytic profile uses CUDA's lists; the mechanism is the same)."""
    real, meta = trace_bytes(name, "cpu"), trace_bytes(name, "meta", "cpu")
    for a, b in zip(real.units, meta.units, strict=True):
        assert (a.saved_bytes, a.output_bytes, a.forward_flops, a.forward_bytes) == \
            (b.saved_bytes, b.output_bytes, b.forward_flops, b.forward_bytes), a.name


def test_meta_autocast_casts_like_cudas_lists():
    a = torch.empty(4, 8, device="meta")
    with MetaAutocast(torch.bfloat16):
        assert torch.mm(a, a.T).dtype == torch.bfloat16
        assert torch.softmax(a.bfloat16(), -1).dtype == torch.float32  # fp32 list on CUDA
        assert torch.relu(a.bfloat16()).dtype == torch.bfloat16  # runs in its input's type
    with MetaAutocast(torch.bfloat16, "cpu"):
        assert torch.softmax(a.bfloat16(), -1).dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["vgg16", "resnet50"])
def test_a_bf16_profile_saves_about_half_the_activations_and_runs_faster(name):
    hw = load("a100-40gb")
    fp32 = analytic_profile(build(name, "paper", device="meta"), hw)
    bf16 = analytic_profile(build(name, "paper", device="meta", precision="bf16"), hw)
    assert fp32.dtype == "float32" and bf16.dtype == "bfloat16"
    # about half: max-pool indices stay int64 (VGG-16: 0.58)
    assert 0.45 < bf16.activation_bytes() / fp32.activation_bytes() < 0.6
    assert sum(u.forward_flops for u in bf16.units) == sum(u.forward_flops for u in fp32.units)
    # tensor cores (250 vs 15.6 TFLOP/s sustained) and half the bytes
    assert bf16.forward_time() + bf16.backward_time() < 0.5 * (fp32.forward_time() + fp32.backward_time())


def test_tensor_core_rate_per_precision():
    v100, h100 = load("v100-abci"), load("h100")
    assert v100.matmul_flops("float16") == 83e12 and v100.matmul_flops("bfloat16") == v100.flops  # no bf16 units
    assert h100.matmul_flops("bfloat16") == 791e12 and h100.matmul_flops("float32") == h100.flops
    dgx = load("dgx2h")
    assert dgx.gpus_per_node == 16 and dgx.device_memory == 32e9 and dgx.matmul_flops("float16") > 83e12


def test_narrow_tensor_core_gemms_run_below_the_sustained_rate():
    """d / (d + d_half) of the tensor-core rate for a GEMM whose narrowest dimension is d; FP32 GEMMs
    (and bf16 on V100, which has no bf16 tensor cores) keep the flat rate."""
    v100 = load("v100-abci")
    half = v100.tensor_half_dim
    assert v100.matmul_flops("float16", half) == pytest.approx(v100.flops_fp16 / 2)
    assert v100.matmul_flops("float16", 96) < v100.matmul_flops("float16", 1536) < v100.flops_fp16
    assert v100.matmul_flops("float32", 64) == v100.flops == v100.matmul_flops("bfloat16", 64)


def mixed_profile():
    hw = load("v100-abci")
    chain = build("megatron-1.2b", "tiny", device="meta", precision="bf16")
    return analytic_profile(chain, hw), chain, hw


def test_profile_weights_are_16_bit_and_the_optimizer_keeps_fp32_masters():
    """Micikevicius et al. 2018 with Adam: 2 (weight) + 2 (gradient) + 4 (master) + 8 (moments) =
    16 bytes per weight; fp32 profiles keep their old meaning (k x the weights)."""
    profile, chain, _ = mixed_profile()
    n = chain.parameter_count()
    assert profile.param_bytes() == 2 * n  # GPT has no BatchNorm: every weight is 16-bit
    assert sum(u.optimizer_bytes for u in profile.units) == 12 * n
    assert profile.weight_state_bytes() - sum(u.buffer_bytes for u in profile.units) == 16 * n
    fp32 = build("megatron-1.2b", "tiny", device="meta")
    assert optimizer_bytes(fp32.units.parameters(), "adam") == 8 * n
    assert master_bytes(4 * n, 8 * n, "adam") == 4 * n  # fp32: the masters are the weights
    assert master_bytes(2 * n, 12 * n, "adam") == 4 * n
    resnet = build("resnet50", "tiny", device="meta", precision="bf16")  # BatchNorm weights stay fp32
    ps = list(resnet.units.parameters())
    p16 = sum(p.numel() * p.element_size() for p in ps)
    assert master_bytes(p16, optimizer_bytes(ps, "sgd"), "sgd") == 4 * sum(p.numel() for p in ps)


@pytest.mark.parametrize("layout", ["device", "host", "streamed"])
def test_simulator_static_bytes_and_traffic_per_layout_in_mixed_precision(layout):
    """Resident weights with the optimizer on the device: 16-bit weights + fp32 masters + state on
    the device. Host optimizer: only the 16-bit weights stay; streamed: none. What crosses the link
    is 16-bit (weights up, gradients down); the host updates the fp32 masters."""
    profile, chain, hw = mixed_profile()
    n = chain.parameter_count()
    buffers = sum(u.buffer_bytes for u in profile.units)
    labels = ["keep"] * len(profile.units)
    plan = from_policies(profile.model, profile.batch, labels, weights="streamed" if layout == "streamed" else
                         "resident", optimizer="host" if layout == "host" else "device")
    static = block_bytes(profile, plan, host_side=layout != "device").static
    assert static == buffers + {"device": 14 * n, "host": 2 * n, "streamed": 0}[layout]
    sim = simulate(profile, plan, hw, capacity=math.inf)
    if layout == "device":
        assert sim.bytes_h2d == sim.bytes_d2h == 0
        assert "host" not in sim.busy or sim.busy["host"] == 0
    else:
        assert sim.bytes_d2h == 2 * n  # 16-bit gradients down
        # 16-bit weights up: streamed ones for the forward and again for the backward, a tied one with each
        # block that uses it (as the runtime uploads it); updated resident ones once, by the block owning them
        tied = sum(u.tied_param_bytes for u in profile.units)
        assert tied > 0
        assert sim.bytes_h2d == (2 * (2 * n + tied) if layout == "streamed" else 2 * n)
        # Adam on the fp32 masters: (3 + 2k) x 4 bytes per weight
        assert sim.busy["host"] == pytest.approx(7 * 4 * n / hw.host_update_bw)
        assert optimizer_traffic_bytes(2 * n, "adam", 12 * n) == 7 * 4 * n


@pytest.mark.slow  # real bf16 steps of random plans, as its fp32 twin in tests/runtime
@settings(max_examples=examples(6), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(keep_or_recompute_plan(tuple(MODELS)))
def test_simulated_peak_within_5_percent_of_the_runtimes_in_bf16(case):
    """The profile traced on meta under CPU autocast rules (the runtime here is a CPU) predicts the
    peak the runtime measures with 16-bit weights and fp32 masters on its ledger."""
    name, plan = case

    original = unit_trace.autocast
    unit_trace.autocast = lambda d, p, _policy=None: original(d, p, "cpu")
    try:
        profile = analytic_profile(build(name, "tiny", 2, device="meta", precision="bf16"), load("v100-abci"))
    finally:
        unit_trace.autocast = original
    predicted = simulate(profile, plan, load("v100-abci"), capacity=math.inf).peak_bytes
    measured = run_steps(build(name, "tiny", 2, seed=0, precision="bf16"), plan, math.inf, 1e9, 1)[0].peak_bytes
    assert measured == pytest.approx(predicted, rel=0.05), plan.policies()


def test_cli_profile_records_the_precision(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["profile", "megatron-1.2b", "--size", "tiny", "--hardware", "v100-abci", "--precision", "bf16",
                 "--out", str(out)]) == 0
    assert Profile.from_json(out).dtype == "bfloat16"
    assert main(["plan", str(out), "--precision", "fp16", "--out", str(tmp_path / "plan.json")]) == 2
    assert "is bfloat16" in capsys.readouterr().err


def test_meta_autocast_casts_an_exported_graphs_aten_operators():
    """transformers' models are traced by torch.export into ATen overloads (`aten.linear.default`): MetaAutocast
    matches them by their base name, as torch.autocast does at the dispatcher. T5 in bf16 then profiles on meta
    (its attention mask and query were of two types before) and saves less than in fp32 (not half: its norms
    and softmax stay in fp32)."""
    a, w = torch.empty(4, 8, device="meta"), torch.empty(16, 8, device="meta")
    with MetaAutocast(torch.bfloat16):
        assert torch.ops.aten.linear.default(a, w).dtype == torch.bfloat16
        assert torch.ops.aten.softmax.int(a.bfloat16(), -1).dtype == torch.float32
    options = {"set": {"d_model": 32, "d_ff": 64, "num_layers": 2, "num_decoder_layers": 2, "num_heads": 2,
                       "d_kv": 16, "vocab_size": 96}, "seq": 16}
    hw = load("v100-abci")
    saved = {precision: sum(u.saved_bytes for u in analytic_profile(
        build("hf:t5", batch=8, device="meta", precision=precision, overrides=options), hw).units)
        for precision in ("fp32", "bf16")}
    assert saved["bf16"] < 0.9 * saved["fp32"], saved
