"""Command line: `karma models`, `karma hardware`, `karma profile ...`.

Bad input (unknown model, size or hardware; a number that is not finite and
positive; a file that is missing, a directory, not UTF-8, malformed, or has a
field of the wrong type or range; an output path that cannot be written)
prints one line on stderr and exits with status 2; nothing is written. Every
output is written whole or not at all (`write_atomic`).

`karma plan` refuses a plan that does not fit (a baseline whose plan the
simulator rejects under the capacity): it exits 2 with the simulator's reason
and writes nothing, so that a plan file on disk is always one that fits its
capacity; `karma simulate` on the plan at a larger `--capacity-gb` shows it.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from dataclasses import asdict
from pathlib import Path

import torch

from karma.cli.args import (
    GRANULARITIES,
    PRECISION_HELP,
    PRECISIONS,
    OneLineParser,
    add_spec_options,
    positive_float,
    positive_int,
    spec_options,
)
from karma.cli.regress import cmd_compare, cmd_reference
from karma.core.errors import KarmaError, choose
from karma.core.files import write_atomic
from karma.core.hardware import load, preset_names
from karma.core.precision_bytes import PROFILE_DTYPE
from karma.parallel.megatron_model import Layout, best_layout, simulate_layout
from karma.parallel.tensor_parallel import check_degree
from karma.plan.plan import Plan
from karma.planner.config import PlannerConfig
from karma.profile.build import make_profile, write_profile
from karma.profile.granularity import auto_note
from karma.profile.profile import Profile
from karma.runtime.attribution import attribute, block_differences, report
from karma.runtime.check_exact import check_exact
from karma.runtime.run import run_plan
from karma.sim.bound import lower_bound
from karma.sim.simulate import in_core_peak_bytes, simulate
from karma.strategies import run_strategy
from models.registry import MODELS, spec


def _timeline_csv(events) -> str:
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=["resource", "op", "block", "start", "end"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(asdict(e) for e in events)
    return text.getvalue()


def cmd_models(_args) -> None:
    for name, entry in MODELS.items():
        sizes = ", ".join(f"{s} (batch {entry.batch[s]})" for s in entry.sizes)
        print(f"{name:16s} {entry.description}\n{'':16s} sizes: {sizes}")


def cmd_hardware(_args) -> None:
    for name in preset_names():
        hw = load(name)
        print(f"{name:10s} {hw.device_memory / 1e9:6.1f} GB  {hw.flops / 1e12:5.1f} TFLOP/s  "
              f"h2d {hw.h2d_bw / 1e9:5.0f} GB/s  {hw.description}")


def cmd_profile(args) -> None:
    def progress(i, n, name):
        if args.verbose and (i + 1 == n or (i + 1) % max(1, n // 10) == 0):
            print(f"  profiled {i + 1}/{n} units ({name})", file=sys.stderr)

    profile = make_profile(args.model, args.size, args.batch, args.source, args.hardware,
                           args.reps, args.threads, progress, args.precision, options=spec_options(args),
                           granularity=args.granularity)
    out = Path(args.out or f"{args.model.replace(':', '-').replace('/', '_')}-{args.size}-{args.source}.json")
    write_profile(profile, out, Path(args.csv) if args.csv else None)
    print(f"{profile.model} {profile.size} batch {profile.batch}: {len(profile.units)} units, "
          f"fwd {profile.forward_time() * 1e3:.1f} ms + bwd {profile.backward_time() * 1e3:.1f} ms, "
          f"in-core peak {in_core_peak_bytes(profile) / 1e9:.2f} GB, {profile.dtype} [{profile.label}] -> {out}")
    if args.granularity == "auto":
        print(f"  {auto_note(profile)}")


def _capacity(args, hw) -> float:
    return hw.device_memory if args.capacity_gb is None else args.capacity_gb * 1e9


def _over_bound(time: float, bound: float) -> str:
    return f"plan/bound {time / bound:.3f}" if bound > 0 else "plan/bound n/a (the bound is 0)"


def _matching(profile, plan) -> None:
    if plan.model != profile.model or plan.batch != profile.batch or plan.units != len(profile.units):
        raise KarmaError(f"plan is for {plan.model} batch {plan.batch} ({plan.units} units), the profile is "
                         f"{profile.model} batch {profile.batch} ({len(profile.units)} units)")


def _precision_matches(args, profile) -> None:
    """The plan's precision is the profile's (its dtype); a --precision that says otherwise is refused."""
    if args.precision and PROFILE_DTYPE[args.precision] != profile.dtype:
        raise KarmaError(f"--precision {args.precision} but the profile {args.profile} is {profile.dtype}: "
                         f"profile the model with --precision {args.precision}")


def cmd_plan(args) -> None:
    profile = Profile.from_json(args.profile)
    _precision_matches(args, profile)
    hw = load(args.hardware)
    capacity = _capacity(args, hw)
    config = None
    if args.seed is not None or args.search_factor is not None:
        config = PlannerConfig(seed=args.seed or 0).longer(args.search_factor or 1.0)
    outcome = run_strategy(args.strategy, profile, hw, capacity, config)
    if outcome.plan is None:
        raise KarmaError(f"strategy '{args.strategy}' has no plan for {profile.model}")
    if not outcome.result.feasible:
        raise KarmaError(f"the {args.strategy} plan for {profile.model} batch {profile.batch} does not fit in "
                         f"{capacity / 1e9:.3f} GB ({outcome.result.reason}); no plan written")
    out = Path(args.out or f"{profile.model}-{args.strategy}-plan.json")
    said = (f"{args.strategy} plan for {profile.model} batch {profile.batch} ({profile.dtype}) in "
            f"{capacity / 1e9:.2f} GB: "
            f"{outcome.time:.4f} s/iteration, peak {outcome.result.peak_bytes / 1e9:.2f} GB, "
            f"{_over_bound(outcome.time, lower_bound(profile, hw, capacity))} [simulated on {hw.name}] -> {out}")
    write_atomic(out, json.dumps(outcome.plan.to_dict(), indent=1))
    print(said)


def cmd_simulate(args) -> None:
    profile = Profile.from_json(args.profile)
    plan = Plan.from_json(args.plan)
    _matching(profile, plan)
    hw = load(args.hardware)
    capacity = _capacity(args, hw)
    result = simulate(profile, plan, hw, capacity)
    if not result.feasible:
        raise KarmaError(f"plan rejected: {result.reason}")
    if args.timeline:
        write_atomic(Path(args.timeline), _timeline_csv(result.timeline))
    busy = ", ".join(f"{k} {v:.3f} s" for k, v in result.busy.items())
    print(f"{plan.strategy} plan for {profile.model} batch {profile.batch} [simulated on {hw.name}]: "
          f"{result.time:.4f} s/iteration, peak {result.peak_bytes / 1e9:.2f} of {capacity / 1e9:.2f} GB, "
          f"h2d {result.bytes_h2d / 1e9:.2f} GB, d2h {result.bytes_d2h / 1e9:.2f} GB, busy: {busy}, "
          f"{_over_bound(result.time, lower_bound(profile, hw, capacity))}")


def cmd_run(args) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    plan = Plan.from_json(args.plan) if args.plan else None
    result = run_plan(args.model, args.size, args.batch, strategy=args.strategy, plan=plan,
                      capacity_fraction=args.capacity_fraction,
                      capacity_bytes=args.capacity_mb * 1e6 if args.capacity_mb else None, steps=args.steps,
                      link_bw=args.link_mbs * 1e6 if args.link_mbs else None, device=args.device,
                      precision=args.precision, options=spec_options(args))
    if args.timeline:
        write_atomic(Path(args.timeline), _timeline_csv(result.reports[-1].timeline))
    last = result.reports[-1]
    print(f"{result.plan.strategy} plan {result.plan.policies()} ({result.plan.weights} weights, depth "
          f"{result.plan.prefetch_depth}) for {args.model} {args.size} in {args.precision}:")
    print(f"  measured  {result.median_time:.4f} s/step (median of {len(result.reports)}), peak "
          f"{result.memory.peak_bytes / 1e6:.1f} MB, h2d {last.bytes_h2d / 1e6:.1f} MB, "
          f"d2h {last.bytes_d2h / 1e6:.1f} MB, loss {last.loss:.4f} [{result.label}]")
    print(f"  predicted {result.predicted.time:.4f} s/step, peak {result.predicted.peak_bytes / 1e6:.1f} MB of "
          f"{result.predicted.capacity / 1e6:.1f} MB [simulator on the measured profile's held-out estimate]; "
          f"measured/predicted {result.median_time / result.predicted.time:.3f}")
    if args.explain:
        table = attribute(last.timeline, last.time, result.predicted.timeline, result.predicted.time)
        print(f"  where the last step ({last.time:.4f} s) and the prediction differ, term by term:")
        print(report(table, block_differences(last.timeline, result.predicted.timeline)))
        if args.explain != "-":
            write_atomic(Path(args.explain), table.to_csv(index=False))
    if args.check_exact:
        exact = check_exact(args.model, args.size, args.batch, result.plan, steps=args.steps,
                            precision=args.precision, options=spec_options(args), capacity=result.predicted.capacity)
        print(f"  {exact.line()}")
        return 0 if exact.equal else 1


def cmd_megatron(args) -> None:
    """One Megatron layout (or the best one) simulated on a preset's nodes."""
    choose("GPT model", args.model, [m for m in MODELS if "heads" in spec(m).sizes["paper"]])
    hw = load(args.hardware)
    gpus = args.gpus
    global_batch = args.global_batch or gpus * spec(args.model).batch["paper"]
    if args.tp is None:
        result, why = best_layout(args.model, hw, gpus, global_batch, args.zero, precision=args.precision)
        if result is None:
            raise KarmaError(why)
    else:
        config = spec(args.model).sizes["paper"]
        check_degree(args.tp, config["hidden"], config["heads"])
        if gpus % args.tp or global_batch % (gpus // args.tp) or (global_batch // (gpus // args.tp)) % args.micro_batch:
            raise KarmaError(f"{gpus} GPUs with tp={args.tp} and micro-batch {args.micro_batch} cannot share the "
                             f"global batch {global_batch}")
        dp = gpus // args.tp
        layout = Layout(args.tp, dp, args.micro_batch, global_batch // dp // args.micro_batch, args.recompute,
                        args.zero, precision=args.precision)
        result = simulate_layout(args.model, layout, hw)
        if result.time is None:
            raise KarmaError(f"{layout.label()} does not fit: {result.reason}")
    print(f"{args.model} on {gpus} GPUs of {hw.name}, global batch {global_batch}: {result.layout.label()}: "
          f"{result.time:.3f} s/iteration, {global_batch / result.time:.2f} sequences/s, peak "
          f"{result.peak_bytes / 1e9:.2f} GB/GPU, tensor-parallel all-reduces {result.tp_comm_s:.3f} s "
          f"[simulated, analytic profile]")


def parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="karma", description="KARMA out-of-core training suite")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    sub.add_parser("models", help="list the model zoo").set_defaults(func=cmd_models)
    sub.add_parser("hardware", help="list the hardware presets").set_defaults(func=cmd_hardware)
    prof = sub.add_parser("profile", help="profile a model (analytic on a preset, or measured here)")
    prof.add_argument("model", help="a zoo name (karma models) or a model spec: torchvision:NAME, hf:MODEL_TYPE, "
                      "hf:path/config.json, package.module:function")
    prof.add_argument("--size", default="paper", help="size preset (paper, small, tiny)")
    prof.add_argument("--batch", type=positive_int, help="batch size (default: the preset's)")
    prof.add_argument("--source", choices=["analytic", "measured"], default="analytic")
    prof.add_argument("--hardware", default="v100-abci",
                      help="preset name or YAML path (analytic); 'cpu' or 'cuda' (measured)")
    prof.add_argument("--reps", type=positive_int, default=5, help="timed repetitions (measured)")
    prof.add_argument("--threads", type=positive_int, help="torch threads (measured)")
    prof.add_argument("--precision", choices=PRECISIONS, default="fp32", help=PRECISION_HELP)
    prof.add_argument("--granularity", choices=(*GRANULARITIES, "auto"), default="block",
                      help="units: a residual block or transformer layer each (block, the paper's tables), one "
                      "layer each, the skip carried across their boundaries (layer: reach beyond one block), or "
                      "blocks cut into layers only where a block's backward alone exceeds --hardware's memory "
                      "(auto, analytic profiles: karma/profile/granularity.py)")
    prof.add_argument("--out", help="JSON output path")
    prof.add_argument("--csv", help="also write the per-unit table as CSV")
    prof.add_argument("-v", "--verbose", action="store_true", help="progress on stderr")
    add_spec_options(prof)
    prof.set_defaults(func=cmd_profile)
    pl = sub.add_parser("plan", help="plan a profile with a strategy (karma or a baseline); a plan that does not "
                        "fit the capacity is refused (exit 2, nothing written)")
    pl.add_argument("profile", help="profile JSON (karma profile ...)")
    pl.add_argument("--strategy", default="karma")
    pl.add_argument("--hardware", default="v100-abci", help="preset name or YAML path")
    pl.add_argument("--capacity-gb", type=positive_float, help="device memory to plan for (default: the hardware's)")
    pl.add_argument("--precision", choices=PRECISIONS,
                    help="the profile's precision (read from its dtype; given, it must match)")
    pl.add_argument("--out", help="plan JSON output path")
    pl.add_argument("--seed", type=int, help="KARMA's planner: the annealing walks' seed (default 0)")
    pl.add_argument("--search-factor", type=positive_float,
                    help="KARMA's planner: every search budget times this (10: a search ten times as long)")
    pl.set_defaults(func=cmd_plan)
    sim = sub.add_parser("simulate", help="simulate one iteration of a plan (the performance model)")
    sim.add_argument("profile")
    sim.add_argument("plan")
    sim.add_argument("--hardware", default="v100-abci")
    sim.add_argument("--capacity-gb", type=positive_float)
    sim.add_argument("--timeline", help="write the timeline as CSV (resource, op, block, start, end)")
    sim.set_defaults(func=cmd_simulate)
    run = sub.add_parser("run", help="train a few steps under a plan here (emulated device) and check the model")
    run.add_argument("model", help="a zoo name or a model spec (see karma profile --help)")
    run.add_argument("--size", default="small")
    run.add_argument("--batch", type=positive_int)
    run.add_argument("--strategy", default="karma", help="plan with this strategy (ignored with --plan)")
    run.add_argument("--plan", help="a plan JSON for this model and batch")
    run.add_argument("--capacity-fraction", type=positive_float, default=0.5,
                     help="device memory as a fraction of the in-core footprint (default 0.5)")
    run.add_argument("--capacity-mb", type=positive_float, help="device memory in MB (overrides the fraction)")
    run.add_argument("--steps", type=positive_int, default=3, help="timed steps, after one warm-up")
    run.add_argument("--link-mbs", type=positive_float,
                     help="emulated link MB/s (default: the V100's compute/PCIe ratio)")
    run.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    run.add_argument("--precision", choices=PRECISIONS, default="fp32",
                     help=PRECISION_HELP + "; bf16 on a CPU, fp16 and bf16 on CUDA")
    run.add_argument("--threads", type=positive_int, default=1, help="torch compute threads (default 1)")
    run.add_argument("--timeline", help="write the last step's timeline as CSV")
    run.add_argument("--explain", nargs="?", const="-", metavar="CSV",
                     help="attribute the difference between the last step and the prediction to named terms "
                          "(printed; also written to CSV if given)")
    run.add_argument("--check-exact", action="store_true",
                     help="also train the same steps in plain PyTorch; exit 1 unless the weights are bitwise equal")
    add_spec_options(run)
    run.set_defaults(func=cmd_run)
    meg = sub.add_parser("megatron", help="simulate Megatron hybrid parallelism (best layout, or the one given)")
    meg.add_argument("model")
    meg.add_argument("--gpus", type=positive_int, required=True)
    meg.add_argument("--hardware", default="v100-abci")
    meg.add_argument("--global-batch", type=positive_int, help="default: GPUs x the paper batch")
    meg.add_argument("--tp", type=positive_int, help="tensor-parallel degree (default: search)")
    meg.add_argument("--micro-batch", type=positive_int, default=1, help="with --tp")
    meg.add_argument("--recompute", action="store_true", help="with --tp: checkpoint every layer")
    meg.add_argument("--zero", action="store_true", help="ZeRO-1 optimizer-state partitioning")
    meg.add_argument("--precision", choices=PRECISIONS, default="fp32",
                     help=PRECISION_HELP + " (Megatron-LM 2019 trained in fp16)")
    meg.set_defaults(func=cmd_megatron)
    ref = sub.add_parser("reference", help="record the pipeline's tracked numbers as the reference")
    ref.add_argument("--results", default="results")
    ref.add_argument("--out", default="results/reference/metrics.csv")
    ref.set_defaults(func=cmd_reference)
    cmp = sub.add_parser("compare", help="compare the pipeline's numbers with the reference (a verdict per number)")
    cmp.add_argument("--results", default="results")
    cmp.add_argument("--reference", default="results/reference/metrics.csv")
    cmp.add_argument("--all", action="store_true", help="show every number, not only the regressions")
    cmp.add_argument("--kind", nargs="+", choices=["simulated", "measured", "accuracy", "reported", "check"],
                     help="compare only numbers of these kinds (default: all)")
    cmp.add_argument("--out", help="also write the full diff table (Markdown)")
    cmp.add_argument("--strict", action="store_true",
                     help="exit 1 on any REGRESSION, MISSING or FAILED verdict (CI); without it the verdicts are "
                          "reported and the exit status is 0")
    cmp.set_defaults(func=cmd_compare)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        status = args.func(args)
    except KarmaError as err:
        print(f"karma: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # an output path that is a directory, a full disk, no permission
        print(f"karma: error: {err.filename or ''}: {err.strerror or err}", file=sys.stderr)
        return 2
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
