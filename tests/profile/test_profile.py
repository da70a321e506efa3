"""Profiles: counts on meta equal a real CPU run; FLOPs match published figures."""

import dataclasses
import json

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.core.storages import storage_key
from karma.plan.coarsen import merge
from karma.profile import measured
from karma.profile.analytic import analytic_profile
from karma.profile.chain import UnitTimes
from karma.profile.measured import consistent_extra, measured_profile, pooled_premiums, time_unit
from karma.profile.profile import GradientBytes, Profile
from karma.profile.trace import OpRecorder, trace_unit
from models import MODELS, build
from models.registry import PAPER_SIX

V100 = load("v100-abci")
COUNTED = ["forward_flops", "backward_flops", "forward_bytes", "backward_bytes", "saved_bytes",
           "saved_input_bytes", "saved_output_bytes", "input_bytes", "output_bytes", "param_bytes",
           "buffer_bytes", "optimizer_bytes", "workspace_bytes", "backward_workspace_bytes"]


def really_saved_bytes(chain) -> int:
    """Bytes saved for backward by one real forward of the whole chain (+ loss) on the CPU."""
    params = {p.untyped_storage().data_ptr() for p in chain.units.parameters()}
    saved = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            saved[ptr] = t.untyped_storage().nbytes()
        return t

    x, y = chain.make_batch()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        chain.step_loss(x, y)
    return sum(saved.values())


@pytest.mark.parametrize("name, size", [(n, "tiny") for n in MODELS] + [("resnet50", "small"),
                                                                       ("megatron-1.2b", "small")])
def test_analytic_saved_bytes_equal_a_real_cpu_run(name, size):
    profile = analytic_profile(build(name, size, device="meta"), V100)
    assert profile.activation_bytes() == really_saved_bytes(build(name, size))


@pytest.mark.parametrize("name", ["resnet50", "wrn28-10", "megatron-1.2b", "vgg16"])
def test_meta_counts_equal_measured_counts(name):
    analytic = analytic_profile(build(name, "tiny", device="meta"), V100)
    measured = measured_profile(build(name, "tiny"), reps=1, warmup=0)
    for a, m in zip(analytic.units, measured.units, strict=True):
        for field in COUNTED:
            assert getattr(a, field) == getattr(m, field), (a.name, field)
        assert m.forward_time > 0 and m.backward_time > 0
    assert measured.source == "measured" and measured.device.startswith("cpu")


def test_resnet50_forward_flops_match_published_gmacs():
    """He et al. 2016 / torchvision: ~4.1 GMACs per 224x224 image, i.e. 8.2 GFLOPs (2 per MAC)."""
    profile = analytic_profile(build("resnet50", "paper", batch=1, device="meta"), V100)
    gflops = sum(u.forward_flops for u in profile.units) / 1e9
    assert abs(gflops / 8.2 - 1) < 0.05


@pytest.mark.parametrize("name", ["resnet50", "megatron-1.2b"])
def test_our_per_operator_flops_sum_to_the_flop_counter_total(name):
    chain = build(name, "tiny", device="meta")
    profile = analytic_profile(chain, V100)
    x, y = chain.make_batch(device="meta")
    with FlopCounterMode(display=False) as counter:
        chain.step_loss(x, y).backward()
    assert sum(u.forward_flops + u.backward_flops for u in profile.units) == counter.get_total_flops()


@pytest.mark.parametrize("name", list(MODELS))
def test_every_paper_size_model_profiles_on_meta(name):
    profile = analytic_profile(build(name, "paper", device="meta"), V100)
    assert profile.forward_time() > 0 and profile.backward_time() > profile.forward_time()
    assert profile.param_bytes() == 4 * build(name, "paper", device="meta").parameter_count()


@pytest.mark.parametrize("name", PAPER_SIX)
def test_paper_batches_need_two_to_four_v100s(name):
    """The documented choice: paper batch sizes need 2x-4x the 16 GB (docs/paper.md), except
    VGG-16, whose first layers alone outgrow 16 GB past batch ~250 (docs/models.md, Batch sizes)."""
    profile = analytic_profile(build(name, "paper", device="meta"), V100)
    times = profile.in_core_peak_bytes() / V100.device_memory
    if name == "vgg16":
        assert 1.0 < times < 2.0
    else:
        assert 2.0 <= times <= 4.0


def test_faster_hardware_gives_faster_units():
    chain = build("resnet50", "paper", device="meta")
    slow, fast = analytic_profile(chain, V100), analytic_profile(chain, load("h100"))
    for s, f in zip(slow.units, fast.units, strict=True):
        assert f.forward_time < s.forward_time and f.backward_time < s.backward_time


def test_gpt_tied_embedding_counted_once():
    profile = analytic_profile(build("megatron-1.2b", "tiny", device="meta"), V100)
    table = 128 * 32 * 4  # vocab x hidden fp32
    assert profile.units[-1].param_bytes == 2 * 32 * 4  # only the final LayerNorm's own weights
    assert profile.units[-1].tied_param_bytes == table
    assert profile.units[0].shared_param_bytes == table  # the embedding owns it
    assert all(u.shared_param_bytes == 0 for u in profile.units[1:])


def test_a_tied_gradient_is_counted_once_from_its_first_backward_on():
    """The head makes the table's gradient; the layers between make only theirs; the embedding
    accumulates into it (the credit went to the unit after the head, found on the runtime's peak)."""
    profile = analytic_profile(build("megatron-1.2b", "tiny", device="meta"), V100)
    grads = GradientBytes()
    made = [grads(u) for u in reversed(profile.units)]
    units = list(reversed(profile.units))
    assert made[0] == units[0].param_bytes + units[0].tied_param_bytes
    assert made[1:-1] == [u.param_bytes for u in units[1:-1]]
    assert made[-1] == units[-1].param_bytes - units[-1].shared_param_bytes
    assert sum(made) == profile.param_bytes()


def synthetic(saved, out, saved_in, saved_out, params, workspace=0) -> Profile:
    units = tuple(
        dataclasses.replace(
            analytic_profile(build("resnet50", "tiny", device="meta"), V100).units[0],
            name=f"u{i}", saved_bytes=s, output_bytes=o, input_bytes=(out[i - 1] if i else 1),
            saved_input_bytes=si, saved_output_bytes=so, param_bytes=p, optimizer_bytes=p, buffer_bytes=0,
            workspace_bytes=workspace, backward_workspace_bytes=workspace)
        for i, (s, o, si, so, p) in enumerate(zip(saved, out, saved_in, saved_out, params, strict=True)))
    return Profile("toy", "tiny", 1, "analytic", "v100-abci", "sgd", units)


def test_in_core_peak_by_hand():
    p = synthetic(saved=[10, 20, 30], out=[5, 6, 7], saved_in=[0, 5, 0], saved_out=[5, 0, 0], params=[100, 0, 1])
    assert p.activation_bytes() == 55
    # static = weights + state = 202; backward of the last unit: grads 1, saved 55, in 6 (it starts from
    # the scalar loss: no output gradient); backward of unit 0: grads 101, saved 10, out 5 (its input is
    # the batch: no input gradient) -> 318; optimizer step 202 + 101 = 303
    assert p.in_core_peak_bytes() == max(202 + 1 + 55 + 0 + 6, 202 + 101 + 10 + 5 + 0, 303)


def test_json_round_trip(tmp_path):
    profile = analytic_profile(build("wrn28-10", "tiny", device="meta"), V100)
    path = tmp_path / "p.json"
    profile.to_json(path)
    assert Profile.from_json(path) == profile
    assert profile.to_csv().count("\n") == len(profile.units) + 1


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d.pop("version"), "'version'"),
    (lambda d: d["units"][0].pop("saved_bytes"), "unit 0 lacks field 'saved_bytes'"),
    (lambda d: d.pop("batch"), "missing field 'batch'"),
    (lambda d: d.update(source="guessed"), "source"),
])
def test_malformed_profile_names_the_field(tmp_path, mutate, match):
    data = analytic_profile(build("wrn28-10", "tiny", device="meta"), V100).to_dict()
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(KarmaError, match=match):
        Profile.from_json(path)


def test_storage_key_distinguishes_meta_storages():
    a = torch.empty(4, device="meta")
    assert storage_key(a) == storage_key(a.view(2, 2)) != storage_key(torch.empty(4, device="meta"))


@pytest.mark.parametrize("name", ["resnet50", "wrn28-10", "megatron-1.2b", "resnet1001"])
def test_in_core_peak_matches_the_live_memory_of_a_real_step(name):
    """The memory model (per unit, composed) against one real CPU step of the whole chain, with every
    storage the step creates tracked until its last tensor dies (weights and optimizer state apart)."""
    chain = build(name, "small")
    x, y = chain.make_batch()
    live = OpRecorder()
    with live:
        chain.step_loss(x, y).backward()
    profile = analytic_profile(build(name, "small", device="meta"), V100)
    static = sum(u.param_bytes + u.optimizer_bytes + u.buffer_bytes for u in profile.units)
    assert (profile.in_core_peak_bytes() - static) == pytest.approx(live.peak, rel=0.05)


@pytest.mark.parametrize("saves_output", [False, True])
def test_a_units_output_counts_where_it_lives(saves_output):
    """An output nobody saved is a forward transient (then the next unit holds it); one the unit saved
    (a final ReLU) is a saved tensor, freed during the unit's own backward, which must not count it
    as held (ResNet's units: the profile held it, and SuperNeurons' peak was 5.7% over the runtime's)."""
    n = 256
    unit = torch.nn.Sequential(torch.nn.Linear(n, n), *([torch.nn.ReLU()] if saves_output else []))
    x = torch.randn(64, n, requires_grad=True)
    trace = trace_unit(unit, x)
    out = 64 * n * 4
    assert trace.output_bytes == out
    assert trace.saved_output_bytes == (out if saves_output else 0)
    assert trace.workspace_bytes == out  # the output nobody saved, or the linear result relu replaced
    assert trace.backward_workspace_bytes == 0  # holding the saved output through its backward gave `out`


class _Counted(torch.nn.Module):
    """A unit that counts its forwards (a BatchNorm, to see that the statistics survive)."""

    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return self.bn(x).relu()


def test_a_measured_recompute_is_the_runtimes_checkpointed_forward_inside_the_backward():
    """time_unit times per repeat a plain pass and a checkpointed one, and the same two ending in an
    op that saves the output; each checkpointed backward runs the forward again (karma/profile/checkpointing.py,
    as the runtime does), which is what the recompute's extra times are measured from. Counted, not
    timed: six forwards per repeat, and the recomputes leave the BatchNorm statistics as one forward
    per pass would."""
    unit, x = _Counted(), torch.randn(8, 4)
    times = time_unit(unit, x, None, None, torch.device("cpu"), reps=2, warmup=1)
    fwd, bwd, last, inner = times.forward, times.backward, times.recompute_extra, times.recompute_inner_extra
    assert unit.calls == 3 * 6
    assert unit.bn.num_batches_tracked.item() == 3 * 4
    assert fwd > 0 and bwd > 0 and last >= -fwd and inner >= -fwd


def test_the_inner_premium_leaves_out_the_saving_ops_own_recompute(monkeypatch):
    """The inner premium is timed on a unit followed by an op that saves its output (x * x), plain and
    checkpointed: the checkpointed backward makes that op again too, so its forward is taken off with the unit's.
    A scripted timer (seconds per pass: plain, checkpointed, with the op, with the op checkpointed), whose
    recompute costs the unit's forward plus 0.5 s as the last unit and plus 0.25 s inside, and whose op costs 1 s
    forward and backward: the premiums come out 0.5 and 0.25, not 1.25 (the op's forward counted as premium)."""
    forward, backward, op, last, inner = 4.0, 8.0, 1.0, 0.5, 0.25
    passes = [(forward, backward), (forward, backward + forward + last),
              (forward + op, backward + op), (forward + op, backward + op + forward + op + inner)]
    calls = iter(range(10**6))
    monkeypatch.setattr(measured, "_timed_pass", lambda run, device: passes[next(calls) % 4])
    times = time_unit(_Counted(), torch.randn(8, 4), None, None, torch.device("cpu"), reps=3, warmup=1)
    assert (times.recompute_extra, times.recompute_inner_extra) == pytest.approx((last, inner))


@pytest.mark.parametrize("differences, expected", [
    ([0.02, 0.03, 0.025], 0.025), ([-0.01, -0.03, -0.02], -0.02),  # every repeat agrees: the median
    ([0.02, -0.001, 0.03], 0.0), ([0.0, 0.01, 0.02], 0.0),  # noise around 0: the paper's recompute = forward
    ([0.01], 0.01)])
def test_a_recompute_premium_is_kept_only_where_every_repeat_agrees_on_its_sign(differences, expected):
    assert consistent_extra(differences) == pytest.approx(expected)


def _times(forward: float, last: float, inner: float, reps: int = 4) -> UnitTimes:
    """A unit measured `reps` times at these (forward, extra last, extra inside), as a timer gives it."""
    samples = tuple((forward, 2 * forward, last, inner) for _ in range(reps))
    return UnitTimes(forward, 2 * forward, last, inner, samples=samples, holdout=(forward, 2 * forward, last, inner))


def test_the_recompute_premium_is_one_fraction_of_the_forward_for_the_chain():
    """Two units, one occurring twice: the chain's premium is the summed premiums over the summed forwards, each
    occurrence counted; every unit gets that fraction of its own forward, the held-out half its own."""
    a, b = _times(1.0, 0.5, -0.1), _times(3.0, 0.3, 0.4)
    pooled = pooled_premiums([a, a, b], holdout=True)
    last, inner = (0.5 + 0.5 + 0.3) / 5.0, (-0.1 - 0.1 + 0.4) / 5.0
    assert [t.recompute_extra for t in pooled] == pytest.approx([last, last, 3 * last])
    assert [t.recompute_inner_extra for t in pooled] == pytest.approx([inner, inner, 3 * inner])
    assert [x for t in pooled for x in t.holdout[2:]] == pytest.approx([last, inner, last, inner, 3 * last, 3 * inner])


def test_a_premium_the_repeats_disagree_on_is_zero_and_none_is_below_minus_the_forward():
    noisy = UnitTimes(1.0, 2.0, samples=((1.0, 2.0, 0.3, -3.0), (1.0, 2.0, -0.2, -3.0), (1.0, 2.0, 0.1, -2.0)))
    (pooled,) = pooled_premiums([noisy], holdout=False)
    assert pooled.recompute_extra == 0.0 and pooled.recompute_inner_extra == -1.0


def test_a_recompute_premium_survives_the_file_and_coarsening(tmp_path):
    profile = analytic_profile(build("resnet50", "tiny", device="meta"), V100)
    assert all(u.recompute_time(last) == u.forward_time for u in profile.units for last in (True, False))
    premium = dataclasses.replace(profile, units=tuple(
        dataclasses.replace(u, recompute_extra_time=-0.5 * u.forward_time,
                            recompute_inner_extra_time=0.5 * u.forward_time) for u in profile.units))
    path = tmp_path / "p.json"
    premium.to_json(path)
    assert Profile.from_dict(json.loads(path.read_text())) == premium
    merged = merge(premium, 0, 3)
    f = [u.forward_time for u in profile.units[:3]]
    assert merged.recompute_time(False) == pytest.approx(1.5 * sum(f))
    assert merged.recompute_time(True) == pytest.approx(1.5 * (f[0] + f[1]) + 0.5 * f[2])  # the last's tail skipped
    raw = json.loads(path.read_text())
    raw["units"][0]["recompute_extra_time"] = -2 * raw["units"][0]["forward_time"]
    with pytest.raises(KarmaError, match="may not exceed the forward"):
        Profile.from_dict(raw)


@pytest.mark.parametrize("device", ["meta", "cpu"])
def test_an_operator_costed_by_its_parts_allocates_only_its_outputs(device):
    """silu_backward has no FLOP formula: the recorder runs its decomposition (sigmoid, products, sums)
    to cost it, but a device runs one kernel, so the backward holds the input gradient and nothing more;
    its parts' operators are still costed one by one."""

    class Silu(torch.nn.Module):
        def forward(self, x):
            return torch.nn.functional.silu(x)

    x = torch.randn(64, 1024, device=device, requires_grad=True)
    trace = trace_unit(Silu(), x)
    assert trace.backward_workspace_bytes == 0
    assert len(trace.backward_ops) > 1
