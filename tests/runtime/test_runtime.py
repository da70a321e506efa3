"""The runtime executes any plan exactly and within its memory (CPU, emulated device)."""

import math
import threading
from concurrent.futures import wait
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.profiler import ProfilerActivity, profile

from karma.core.errors import KarmaError
from karma.core.hardware import load
from karma.core.storages import storage_key
from karma.plan.plan import UPDATE_ORDERS, from_policies
from karma.profile.analytic import analytic_profile
from karma.profile.measured import measured_profile
from karma.report.tables import step_terms_markdown, step_terms_rows
from karma.runtime import emulation
from karma.runtime.copies import copy_into, to_device, to_host
from karma.runtime.cuda import CudaRunner
from karma.runtime.emulation import TERM_SLUGS, EmulatedRunner, default_link_bandwidth, run_steps, validate
from karma.runtime.execute import make_optimizer, pools_by_stream, train_step
from karma.runtime.gpu_check import main
from karma.runtime.ledger import DeviceOOM, Ledger, LiveTracker
from karma.runtime.link import EmulatedLink
from karma.runtime.rates import Rates, cpu_rates, measure_update, weight_shapes
from karma.runtime.saved import SavedTensors
from karma.runtime.streamed import HostWeights
from karma.sim.simulate import in_core_peak_bytes, simulate
from models import build
from tests.fuzz import examples

MODELS = ["resnet50", "vgg16", "resnet1001", "wrn28-10", "megatron-1.2b"]
SETTINGS = settings(max_examples=examples(8), deadline=None, suppress_health_check=list(HealthCheck), database=None)


@st.composite
def model_and_plan(draw, granularity="block"):
    name = draw(st.sampled_from(MODELS))
    n = len(build(name, "tiny", device="meta", granularity=granularity))
    labels = draw(st.lists(st.sampled_from(["keep", "swap", "recompute"]), min_size=n, max_size=n))
    segments = draw(st.lists(st.integers(0, n - 1), max_size=3))
    plan = from_policies(name, 2, labels, segments=segments, checkpoint=draw(st.sampled_from(["device", "host"])),
                         prefetch_depth=draw(st.integers(0, 3)),
                         weights=draw(st.sampled_from(["resident", "streamed"])),
                         update_order=draw(st.sampled_from(UPDATE_ORDERS)))
    return name, plan


def train_both(name, plan, steps=3, capacity=math.inf, host_updates=False, physical=False, granularity="block",
               split=frozenset()):
    ref, run = (build(name, "tiny", seed=5, granularity=granularity, split=split) for _ in range(2))
    opt_ref = make_optimizer(ref)
    reports = []
    with EmulatedLink(2e9, 2e9) as link:
        if plan.weights == "streamed" or host_updates:
            opt_run = HostWeights(run, plan, link=link, physical=physical)
        else:
            opt_run = make_optimizer(run)
        for s in range(steps):
            batch = run.make_batch(seed=s)
            torch.manual_seed(1000 + s)
            opt_ref.zero_grad()
            ref.step_loss(*batch).backward()
            opt_ref.step()
            torch.manual_seed(1000 + s)
            reports.append(train_step(run, plan, opt_run, batch, Ledger(capacity), link))
    if isinstance(opt_run, HostWeights):
        opt_run.sync()
        opt_run.close()
    return ref, run, reports


@pytest.mark.slow
@SETTINGS
@given(model_and_plan(), st.booleans(), st.booleans())
def test_any_plan_trains_exactly_like_plain_pytorch(case, host_updates, physical):
    """Bitwise for keep/swap plans; recompute too here (RNG and BatchNorm statistics restored),
    which is stricter than the float tolerance the design allows. Also with the optimizer on
    the host for resident weights (updated weights sent back up), and with streamed weights
    whose device storage is freed between uploads, as on CUDA (`physical`)."""
    name, plan = case
    ref, run, reports = train_both(name, plan, host_updates=host_updates, physical=physical)
    for (key, a), b in zip(ref.units.state_dict().items(), run.units.state_dict().values(), strict=True):
        assert torch.equal(a, b), key
    assert all(r.peak_bytes > 0 and math.isfinite(r.loss) for r in reports)
    moves = plan.weights == "streamed" or host_updates or any(b.policy == "swap" or (b.policy == "recompute" and
                                                                     b.checkpoint == "host") for b in plan.blocks)
    assert (reports[-1].bytes_d2h > 0) == moves


class SerialLink(EmulatedLink):
    """An emulated link whose submitter waits for each copy: the step's memory events then come
    in program order, so its peak is the same every run (with copies racing the compute, a
    swap-out may free its block before or after the next block allocates: a plan's peak moved
    by ~4% between runs). Copies still run on the link's workers, outside the step's tracker."""

    def submit(self, *args, **kwargs):
        future = super().submit(*args, **kwargs)
        wait([future])
        return future


def step_peaks(name, plan, capacity, steps=2):
    """Peak device bytes of each of `steps` training steps of `plan` under `capacity`."""
    run = build(name, "tiny", seed=5)
    with SerialLink(1e15, 1e15) as link:
        opt = HostWeights(run, plan, link=link) if plan.weights == "streamed" else make_optimizer(run)
        try:
            return [train_step(run, plan, opt, run.make_batch(seed=s), Ledger(capacity), link).peak_bytes
                    for s in range(steps)]
        finally:
            if isinstance(opt, HostWeights):
                opt.close()


@pytest.mark.slow
@SETTINGS
@given(model_and_plan(), st.floats(0.3, 0.999))
def test_the_device_never_exceeds_its_capacity(case, fraction):
    """A capacity at the steps' measured peak runs without DeviceOOM, with that same peak; any
    capacity below it raises DeviceOOM naming where (the ledger raises before going over)."""
    name, plan = case
    peak = max(step_peaks(name, plan, math.inf))
    assert max(step_peaks(name, plan, peak)) == peak
    with pytest.raises(DeviceOOM) as err:
        step_peaks(name, plan, min(peak * fraction, peak - 1))
    assert any(w in str(err.value) for w in ("block", "weights", "optimizer state", "checkpoint", "prefetch"))


def test_a_capacity_below_the_weights_is_refused_naming_them():
    chain = build("wrn28-10", "tiny")
    weights = sum(p.numel() * 4 for p in chain.units.parameters())
    with pytest.raises(DeviceOOM, match="weights"), EmulatedLink(1e9, 1e9) as link:  # resident weights
        train_step(chain, from_policies("wrn28-10", 2, ["recompute"] * 5), make_optimizer(chain),
                   chain.make_batch(), Ledger(weights / 2), link)


def test_swap_moves_the_saved_bytes_both_ways():
    plan = from_policies("wrn28-10", 2, ["swap"] * 5)
    _, _, reports = train_both("wrn28-10", plan, steps=1)
    r = reports[0]
    assert r.bytes_d2h == r.bytes_h2d > 0
    assert r.device == "cpu-emulated (link 2000.0 MB/s)"
    ops = {(e.resource, e.op) for e in r.timeline}
    assert {("d2h", "swap out"), ("h2d", "prefetch"), ("compute", "forward"), ("compute", "backward")} <= ops


def test_plan_for_another_model_is_refused():
    chain = build("wrn28-10", "tiny")
    with pytest.raises(KarmaError, match="plan is for"), EmulatedLink(1e9, 1e9) as link:
        train_step(chain, from_policies("wrn28-10", 2, ["keep"] * 4), make_optimizer(chain), chain.make_batch(),
                   Ledger(math.inf), link)


def test_emulated_link_takes_bytes_over_bandwidth():
    with EmulatedLink(1e8, 1e8) as link:
        future = link.submit("d2h", 5_000_000, lambda: 1, "swap out", 0)
        assert future.result() == 1
        event = link.events[0]
        assert event.end - event.start >= 0.05


def test_validate_compares_every_strategy_with_its_prediction():
    profile = measured_profile(build("wrn28-10", "tiny", batch=8), reps=1, warmup=0)
    capacity = in_core_peak_bytes(profile)
    link = default_link_bandwidth(profile) * 100
    runner = EmulatedRunner(lambda: build("wrn28-10", "tiny", batch=8, seed=1), capacity, link, steps=1)
    table = validate(profile, ["vdnn", "karma"], capacity, cpu_rates(link, profile.optimizer), runner)
    assert list(table.strategy) == ["vdnn", "karma"]
    ran = table[table.status == "ok"]
    assert len(ran) and (ran.measured_s > 0).all() and (ran.predicted_s > 0).all()
    assert (ran.measured_peak_MB <= capacity / 1e6).all()
    assert table.source.str.contains("measured on cpu-emulated").all()
    assert table.rates.str.contains("host optimizer").all()
    # the last timed step, term by term (karma/runtime/attribution.py), beside the prediction at its speed
    measured = ran[[f"{slug}_measured_s" for slug in TERM_SLUGS.values()]].sum(axis=1)
    predicted = ran[[f"{slug}_predicted_s" for slug in TERM_SLUGS.values()]].sum(axis=1)
    assert (measured > 0).all() and (predicted > 0).all() and (ran.terms_processor_speed > 0).all()
    terms = step_terms_rows(table)
    assert len(terms) == len(ran) * len(TERM_SLUGS)
    for _, part in terms.groupby("strategy"):
        assert part.difference_s.sum() == pytest.approx(part.measured_s.sum() - part.predicted_s.sum())
    assert "## wrn28-10" in step_terms_markdown(terms)


def test_validate_writes_a_table_when_every_plan_runs_out():
    """A run in which every planned strategy ran out of the emulated device (the reach case's one plan that fits
    did, in a pipeline run) is a table of such rows, not a crash of the rule."""
    class OutOfMemory:
        steps = 1

        def where(self):
            return "nowhere"

        def __call__(self, plan):
            raise DeviceOOM("forward of block 0: over")

    profile = analytic_profile(build("wrn28-10", "tiny", 8, device="meta"), load("v100-abci"))
    table = validate(profile, ["karma"], in_core_peak_bytes(profile), Rates(1e8, 1e8, 1e9, 1e9, "emulated"),
                     OutOfMemory())
    assert list(table.status) == ["OOM (measured): forward of block 0: over"]
    assert table.measured_s.isna().all() and table.memory_wait_s.isna().all()


def test_validate_holds_its_predictions_to_the_capacity_the_plans_run_under(monkeypatch):
    """Plans are made for the capacity less a headroom, then predicted on the held-out times: those move copies,
    and with them the peak, a little, so the prediction is held to the full capacity (a KARMA plan 1 MB past the
    planned capacity on its held-out times went unmeasured, and the term split crashed on its missing time)."""
    capacities = []

    def recorded(profile, plan, hw, capacity=None, **kw):
        capacities.append(capacity)
        return simulate(profile, plan, hw, capacity, **kw)

    class Fixed:
        """Every plan runs one step of a second, at no memory, with no timeline."""

        steps = 1

        def where(self):
            return "nowhere"

        def __call__(self, plan):
            step = SimpleNamespace(time=1.0, memory_wait=0.0, timeline=[], peak_bytes=0.0)
            return step, [step]

    monkeypatch.setattr(emulation, "simulate", recorded)
    profile = analytic_profile(build("wrn28-10", "tiny", 8, device="meta"), load("v100-abci"))
    capacity = in_core_peak_bytes(profile) * 0.7
    validate(profile, ["checkpoint", "karma"], capacity, Rates(1e8, 1e8, 1e9, 1e9, "emulated"), Fixed())
    assert capacities and all(c == capacity for c in capacities)


@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_the_host_optimizer_rate_is_measured_with_the_runtimes_optimizer(optimizer):
    """Bytes touched per second by one host thread; Adam touches 7 values per weight, SGD 5, so a
    step of the same weights takes Adam longer but its rate stays the same order."""
    rate = measure_update(optimizer, [[torch.Size([1 << 20])]], reps=2)
    assert 1e7 < rate < 1e12


def test_optimizer_rates_are_measured_on_the_chains_own_weights():
    """The probe steps weights of the chain's shapes, each owned weight once (a GPT's tied head with the
    embedding), in one group per unit; the device's rate over all of them at once."""
    chain = build("megatron-1.2b", "tiny", seed=0)
    shapes = weight_shapes(chain)
    assert len(shapes) == len(chain)
    distinct = {id(p): p.numel() for p in chain.units.parameters()}
    assert sum(s.numel() for group in shapes for s in group) == sum(distinct.values())
    rates = cpu_rates(1e8, chain.optimizer, chain)
    assert rates.h2d == rates.d2h == 1e8 and 1e7 < rates.host_update < 1e12 and 1e7 < rates.memory_bw < 1e12


@st.composite
def keep_or_recompute_plan(draw, models=tuple(MODELS)):
    """Plans whose memory does not depend on timing: no copies (resident weights, checkpoints kept)."""
    name = draw(st.sampled_from(models))
    n = len(build(name, "tiny", device="meta"))
    labels = draw(st.lists(st.sampled_from(["keep", "recompute"]), min_size=n, max_size=n))
    segments = draw(st.lists(st.integers(0, n - 1), max_size=3))
    return name, from_policies(name, 2, labels, segments=segments)


@pytest.mark.slow
@settings(max_examples=examples(12), deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(keep_or_recompute_plan())
def test_the_simulator_predicts_the_runtimes_peak_within_5_percent(case):
    """docs/design.md: the simulator agrees with the runtime on what it measures. The profile is counted on
    the meta device (equal to a real run, docs/machine.md); the runtime counts every tensor it creates."""
    name, plan = case
    predicted = simulate(analytic_profile(build(name, "tiny", 2, device="meta"), load("v100-abci")), plan,
                         load("v100-abci"), capacity=math.inf).peak_bytes
    measured = run_steps(build(name, "tiny", 2, seed=0), plan, math.inf, 1e9, 1)[0].peak_bytes
    assert measured == pytest.approx(predicted, rel=0.05), plan.policies()


@pytest.mark.slow
@SETTINGS
@given(st.sampled_from(["block", "layer"]).flatmap(lambda g: st.tuples(st.just(g), model_and_plan(g))),
       st.sampled_from(["device", "host"]))
def test_the_runtime_moves_the_bytes_the_simulator_moves(case, optimizer):
    """Link bytes each way, of every kind of plan at block and layer granularity: what the simulator charges
    the link for is what the runtime copies (a copy the simulator does not see is free time the planner would
    exploit)."""
    granularity, (name, plan) = case
    if plan.weights == "resident":
        plan = replace(plan, optimizer=optimizer)
    hw = load("v100-abci")
    profile = analytic_profile(build(name, "tiny", 2, device="meta", granularity=granularity), hw)
    predicted = simulate(profile, plan, hw, capacity=math.inf)
    memory, _ = run_steps(build(name, "tiny", 2, seed=0, granularity=granularity), plan, math.inf, 1e9, 1)
    assert (memory.bytes_h2d, memory.bytes_d2h) == (predicted.bytes_h2d, predicted.bytes_d2h), plan.policies()


def test_a_host_checkpoint_a_kept_block_also_saves_is_copied_whole_as_predicted():
    """ResNet-50's unit 1 saves its output, unit 2's input: a checkpoint of unit 2 costs no device bytes while
    unit 1 is kept, but on the host the runtime still copies it each way and brings back a second copy. The
    simulator once moved nothing for it, and the planner chose such checkpoints for free link time."""
    chain = build("resnet50", "tiny", 2, seed=0)
    profile = analytic_profile(build("resnet50", "tiny", 2, device="meta"), load("v100-abci"))
    assert profile.shared_bytes[1] == profile.units[2].input_bytes > 0
    labels = ["keep", "keep", "recompute", "keep", "keep", "keep"]
    host, device = (from_policies("resnet50", 2, labels, checkpoint=c) for c in ("host", "device"))
    hw = load("v100-abci")
    sim_host, sim_device = (simulate(profile, p, hw, capacity=math.inf) for p in (host, device))
    memory, _ = run_steps(chain, host, math.inf, 1e9, 1)
    assert memory.bytes_d2h == memory.bytes_h2d == sim_host.bytes_d2h == sim_host.bytes_h2d \
        == profile.units[2].input_bytes
    assert sim_device.bytes_d2h == 0
    assert sim_host.peak_bytes >= sim_device.peak_bytes  # never cheaper than the checkpoint on the device
    assert memory.peak_bytes == pytest.approx(sim_host.peak_bytes, rel=0.05)


def test_a_checkpoint_on_the_host_goes_out_when_its_blocks_forward_ends_in_the_runtime_and_the_model():
    """The runtime copies what a block saved to the host once the block's forward is over, its checkpoint too;
    the simulator once sent the checkpoint as the forward began, and predicted no wait where the next blocks
    waited for it (ResNet-50's KARMA plan: 47 ms of waits a step, predicted none)."""
    chain = build("resnet50", "tiny", 2, seed=0)
    profile = analytic_profile(build("resnet50", "tiny", 2, device="meta"), load("v100-abci"))
    plan = from_policies("resnet50", 2, ["keep", "recompute", "keep", "recompute", "keep", "keep"], checkpoint="host")
    _, (step,) = run_steps(chain, plan, math.inf, 1e9, 1)
    simulated = simulate(profile, plan, load("v100-abci"), capacity=math.inf).timeline
    for timeline in (step.timeline, simulated):
        offloads = {e.block: e.start for e in timeline if e.op == "offload checkpoint"}
        forward_end = {k: max(e.end for e in timeline if e.op == "forward" and e.block == k) for k in offloads}
        assert sorted(offloads) == [1, 3]
        assert all(offloads[k] >= forward_end[k] - 1e-9 for k in offloads)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: run the check itself")
def test_the_gpu_check_without_a_gpu_is_one_line(capsys):
    assert main([]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["gpu_check: error: CUDA was asked for but no CUDA device is available"]


def test_copies_on_the_cpu_are_exact_clones():
    t = torch.randn(3, 4).t()
    h = to_host(t)
    assert torch.equal(h, t) and h.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()
    d = to_device(h, torch.device("cpu"))
    assert torch.equal(d, t) and d.data_ptr() != h.data_ptr()
    w = torch.zeros(4, 3)
    copy_into(w, h)
    assert torch.equal(w, t)


def test_a_block_holding_both_users_of_a_tied_weight_updates_it_once():
    """GPT's embedding and head share wte: one block over the whole chain must still step it once
    (it was listed twice, stepped twice and its gradient dropped: found by the property test)."""
    n = len(build("megatron-1.2b", "tiny", device="meta"))
    plan = from_policies("megatron-1.2b", 2, ["recompute"] * n, weights="streamed")
    ref, run, _ = train_both("megatron-1.2b", plan)
    for (key, a), b in zip(ref.units.state_dict().items(), run.units.state_dict().values(), strict=True):
        assert torch.equal(a, b), key


def test_uploading_a_tied_weight_another_block_holds_leaves_it_untouched():
    """Streamed weights: the head's block holds GPT's tied embedding weight; uploading the embedding's block (its
    prefetch for the backward) must not write that weight again in place, from the link's thread, while the head's
    recompute may be saving it (the property test above hit torch.utils.checkpoint's "pack hook is modifying its
    input in place" once, a race of the two threads)."""
    chain = build("megatron-1.2b", "tiny", seed=5)
    n = len(chain)
    plan = from_policies("megatron-1.2b", 2, ["keep"] * n, weights="streamed")
    embedding, head = list(chain.units.children())[0], list(chain.units.children())[-1]
    (tied,) = {id(p): p for p in embedding.parameters()}.keys() & {id(p): p for p in head.parameters()}.keys()
    weight = next(p for p in head.parameters() if id(p) == tied)
    with EmulatedLink(2e9, 2e9) as link:
        weights = HostWeights(chain, plan, link=link, physical=True)
        ledger = Ledger(math.inf)
        weights.upload(n - 1, link, ledger).result()
        version = weight._version
        weights.upload(0, link, ledger).result()
        assert weight._version == version
        weights.evict(n - 1, ledger)
        weights.evict(0, ledger)
        weights.upload(0, link, ledger).result()  # held by nobody: written again
        assert weight._version > version
        weights.close()


def test_a_saved_weight_view_does_not_keep_an_evicted_upload_alive():
    """Linear layers save weight.t(): the store keeps the weight, not that view, so the device
    storage of an evicted streamed weight is freed (on an H200 every kept linear weight was held
    twice, and Megatron's plan ran out of the cap); the backward gets the view of the new upload."""
    weight = torch.nn.Parameter(torch.randn(4, 3))
    store = SavedTensors(0, False, Ledger(math.inf), {storage_key(weight): weight, ("id", id(weight)): weight})
    packed = store.pack(weight.t())
    evicted = weight.data.data_ptr()
    weight.data = torch.randn(4, 3)  # evicted, then uploaded again for the backward
    held = [t for t in torch.utils._pytree.tree_flatten(packed)[0] if isinstance(t, torch.Tensor)]
    assert all(t.data_ptr() != evicted for t in held)
    assert torch.equal(store.unpack(packed), weight.data.t())
    assert store.unpack(store.pack(weight)) is weight


def test_a_cuda_run_happens_in_a_process_of_its_own_and_its_error_comes_back():
    """CudaRunner runs each plan in a fresh process (a failed run can leave device memory behind);
    the child's error comes back as the same error, here the one for a machine without CUDA."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the run would succeed")
    n = len(build("wrn28-10", "tiny", device="meta"))
    plan = from_policies("wrn28-10", 2, ["keep"] * n)
    with pytest.raises(KarmaError, match="no CUDA device"):
        CudaRunner("wrn28-10", "tiny", 2, 1e9, steps=1)(plan)


def test_an_oom_names_each_streams_pool():
    """A CUDA OOM reports the allocator's pools per stream (from memory_snapshot segments)."""
    segments = [{"stream": 0, "total_size": 4e9, "allocated_size": 1e9},
                {"stream": 0x55, "total_size": 2e9, "allocated_size": 0},
                {"stream": 0, "total_size": 1e9, "allocated_size": 1e9}]
    assert pools_by_stream(segments) == ("stream 0x0: 5.00 GB reserved, 2.00 GB allocated, "
                                         "stream 0x55: 2.00 GB reserved, 0.00 GB allocated")
    assert pools_by_stream([]) == "no segments"


def _fork(n: int):
    """A tensor h read twice (h * 2, and the skip around it), every gradient a dense n x n float32
    tensor of its own (4 n^2 bytes). Backward: y's gradient g = c (c is freed, its backward done), then
    2 g for the first branch, then the sum of the two gradients of h."""
    torch.manual_seed(0)
    x = torch.randn(n, n, requires_grad=True)
    c = torch.randn(n, n)
    h = x * 1.5
    return (h * 2 + h).mul(c).sum()


def test_a_forks_two_gradients_are_summed_in_place_as_plain_pytorch_sums_them():
    """The premise of karma.core.storages.accumulates_gradients, on this torch: a plain backward sums a fork's
    gradients in place (no out-of-place add in the backward), and the emulated device's memory step counts
    that sum as plain PyTorch's memory holds it, not as the new tensor its own dispatch mode makes."""
    n = 256
    loss = _fork(n)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss.backward()
    names = [e.name for e in prof.events()]
    assert "aten::add_" in names and "aten::add" not in names

    ledger = Ledger(math.inf)
    with LiveTracker(ledger):
        loss = _fork(n)
        base = ledger.peak = ledger.used  # x, and c (saved for the backward)
        loss.backward()
    tensor = 4 * n * n
    # at the sum: g and 2 g, c gone: one tensor over the forward's; summed out of place, two
    assert tensor <= ledger.peak - base <= tensor + 1024


def test_an_allocation_past_the_capacity_waits_for_the_copies_to_the_host_in_flight():
    """As CUDA's caching allocator synchronizes with the copies still using freed blocks before it reports out
    of memory (karma/runtime/ledger.py): with a swap-out in flight whose end frees 60 of the 100 bytes, an
    allocation of 60 waits for it and fits, and the peak never passes the capacity; with nothing in flight, or
    on a link worker's thread (which must not wait on its own queue), it is out of memory at once."""
    ledger = Ledger(100)
    ledger.hold("swapped", 60, "store", "block 0")
    ledger.expect_release()

    def copy_ends():
        ledger.release("swapped", "store")
        ledger.released()

    timer = threading.Timer(0.05, copy_ends)
    timer.start()
    ledger.hold("next", 60, "compute", "forward of block 1")
    timer.join()
    assert ledger.used == 60 and ledger.peak == 60 and ledger.in_flight == 0 and ledger.waited > 0
    with pytest.raises(DeviceOOM):
        ledger.hold("more", 60, "compute", "forward of block 2")
    ledger.expect_release()
    failed = []

    def on_a_worker():
        try:
            ledger.hold("more", 60, "worker", "prefetch of block 0")
        except DeviceOOM as err:
            failed.append(err)

    worker = threading.Thread(target=on_a_worker)
    worker.start()
    worker.join()
    assert failed and ledger.used == 60
