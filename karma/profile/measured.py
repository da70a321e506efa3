"""Measured profile: the same fields as the analytic one, timed on a real device.

Bytes are counted exactly as in the analytic profile (the same hooks, on real
tensors); forward and backward times are the median of `reps` timed runs after
`warmup` untimed ones, per distinct unit, with gradients cleared before each
run so every run does the work of a first step. On CUDA the device is
synchronised around each timed pass.

A recompute is timed as the runtime runs it (karma/profile/checkpointing.py): each run is
followed by one under checkpoint, and the checkpointed backward less the plain
backward less the plain forward is what a recompute costs beyond the forward, as
the last unit of its segment (UnitProfile.recompute_extra_time; checkpoint's early
stop skips a tail nobody saved, so it may be negative). Inside a segment the next
unit saves the output, so it is made again: a second pair of runs ends in an op
that saves each output tensor (x * x, in both runs) and gives recompute_inner_extra_time:
the checkpointed backward makes that op again too, so the forward taken off is the one
with the op, and the op's own costs cancel.

One unit's premium is a difference of noisy passes, within its own noise (a few repeats move it by
a fifth of a forward), and the planner picks the plans whose recompute looks cheapest, noise
included. So the premium is estimated for the whole chain, as a fraction of the forward
(`pooled_premiums`): per repeat, the units' premiums summed over the chain (each unit as often as it
occurs) over their forwards summed; the median over the repeats where every repeat agrees on the sign,
else 0 (the paper's recompute = forward); never below minus one forward. Every unit's premium is that
fraction of its own forward. Summed over tens of units the noise largely cancels; a chain of one repeated
layer gets no such help, and then the sign rule decides. The held-out estimate pools its own repeats.

Each time carries its spread (half the range of the repeats), and with `holdout` a second estimate
from as many more repeats, interleaved with the first (docs/profiles.md, *A measurement the planner
cannot exploit*): a plan chosen on the first estimate is predicted on the second.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import torch

from karma.core.host_memory import keep_freed_memory
from karma.profile.chain import UnitTimes, profile_chain
from karma.profile.checkpointing import checkpointed
from karma.profile.profile import Profile
from karma.profile.trace import run_backward, run_forward
from models.boundary import tensors
from models.chain import ChainModel


def device_label(device: torch.device) -> str:
    if device.type == "cuda":
        return f"cuda:{torch.cuda.get_device_name(device)}"
    threads = torch.get_num_threads()
    return f"cpu ({threads} thread{'s' if threads > 1 else ''})"


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed_pass(run, device: torch.device) -> tuple[float, float]:
    """(forward s, backward s) of one pass: `run()` gives the result the backward starts from."""
    _sync(device)
    t0 = time.perf_counter()
    result = run()
    _sync(device)
    t1 = time.perf_counter()
    run_backward(result)
    _sync(device)
    return t1 - t0, time.perf_counter() - t1


def _saved_by_next(result):
    """The unit's output as the next unit would hold it: each tensor through an op that saves it."""
    if isinstance(result, tuple):
        return tuple(t * t if t.grad_fn is not None else t for t in result)
    return result * result


def time_unit(unit, x, loss, target, device: torch.device, reps: int, warmup: int,
              precision: str = "fp32", holdout: bool = False) -> UnitTimes:
    """Median forward and backward seconds of one unit (the forward under autocast in mixed
    precision), and the median extra seconds of recomputing it, as the last unit of its segment
    and inside one (the module docstring), with their spreads and the samples of every timed repeat.
    With `holdout`, twice the repeats, interleaved: the even ones give the times, the odd ones the
    held-out estimate (UnitProfile.holdout)."""

    def forward(inputs):
        return run_forward(unit, inputs, loss, target, precision)

    runs = (lambda: forward(x), lambda: checkpointed(forward, [unit], x),
            lambda: _saved_by_next(forward(x)), lambda: checkpointed(lambda i: _saved_by_next(forward(i)), [unit], x))
    samples = []  # per timed repeat: (forward, backward, extra last, extra inside)
    for r in range(warmup + reps * (2 if holdout else 1)):
        times = []
        for run in runs:
            for p in unit.parameters():
                p.grad = None
            for t in tensors(x):
                t.grad = None
            times.append(_timed_pass(run, device))
        if r >= warmup:
            (f, b), (_, b_last), (f_held, b_held), (_, b_inner) = times
            # inside a segment the recompute makes the saving op (x * x) again too: less the forward with it
            samples.append((f, b, b_last - b - f, b_inner - b_held - f_held))
    times = _estimate(samples[::2] if holdout else samples)
    return UnitTimes(*times, forward_spread=_half_range([s[0] for s in samples]),
                     backward_spread=_half_range([s[1] for s in samples]),
                     holdout=_estimate(samples[1::2]) if holdout else (), samples=tuple(samples))


def _estimate(samples: list[tuple[float, float, float, float]]) -> tuple[float, float, float, float]:
    """(forward, backward, extra last, extra inside) of one unit's repeats: medians, the extras never below
    minus the forward (`pooled_premiums` replaces the extras with the chain's)."""
    f = statistics.median(s[0] for s in samples)
    return (f, statistics.median(s[1] for s in samples), max(statistics.median(s[2] for s in samples), -f),
            max(statistics.median(s[3] for s in samples), -f))


def _half_range(values: list[float]) -> float:
    return (max(values) - min(values)) / 2


def consistent_extra(differences: list[float]) -> float:
    """The median of repeated premium estimates where every repeat has the same sign, else 0 (the
    module docstring says why). One repeat is taken as it is."""
    if all(d > 0 for d in differences) or all(d < 0 for d in differences):
        return statistics.median(differences)
    return 0.0


def premium_fractions(samples: list[tuple[tuple[float, float, float, float], ...]]) -> tuple[float, float]:
    """The chain's recompute premiums (last in a segment, inside one) as fractions of the forward, from each
    unit's (every occurrence's) repeats: per repeat the summed premiums over the summed forwards, then
    `consistent_extra` over the repeats, never below -1 (the module docstring)."""
    reps = min(len(s) for s in samples)
    fractions = []
    for column in (2, 3):
        per_repeat = []
        for r in range(reps):
            forward = sum(s[r][0] for s in samples)
            per_repeat.append(sum(s[r][column] for s in samples) / forward if forward > 0 else 0.0)
        fractions.append(max(consistent_extra(per_repeat), -1.0))
    return fractions[0], fractions[1]


def pooled_premiums(occurrences: list[UnitTimes], holdout: bool) -> list[UnitTimes]:
    """Every unit's times with its recompute premiums replaced by the chain's fraction of its forward
    (`premium_fractions`), the planning and the held-out repeats each pooled on their own."""
    halves = [[t.samples[::2] if holdout else t.samples for t in occurrences]]
    if holdout:
        halves.append([t.samples[1::2] for t in occurrences])
    (last, inner), *held = [premium_fractions(half) for half in halves]
    out = []
    for t in occurrences:
        kept = t.holdout
        if held:
            f = t.holdout[0]
            kept = (*t.holdout[:2], held[0][0] * f, held[0][1] * f)
        out.append(replace(t, recompute_extra=last * t.forward, recompute_inner_extra=inner * t.forward, holdout=kept))
    return out


def measured_profile(model: ChainModel, reps: int = 5, warmup: int = 1, progress=None,
                     holdout: bool = False) -> Profile:
    """Profile `model` (built on a real device) by running it there, in the model's precision
    (real torch.autocast: bf16 works on a CPU, fp16 wants CUDA). With `holdout`, each unit is timed
    `reps` more times, interleaved, for an independent second estimate (Profile.held_out): plan on the
    profile, predict the chosen plan on its held-out estimate."""
    if reps < 1 or warmup < 0:
        raise ValueError("reps must be >= 1 and warmup >= 0")
    device = next(model.units.parameters()).device
    if device.type == "cpu":  # the emulated device: its allocator keeps freed blocks, as a GPU's does
        keep_freed_memory()

    def timer(unit, x, loss, target, _trace):
        return time_unit(unit, x, loss, target, device, reps, warmup, model.precision, holdout)

    how = f"median of {reps} runs after {warmup} warm-up" + (f" (and of {reps} more, interleaved, held out)"
                                                             if holdout else "")
    return profile_chain(model, device, timer, "measured", device_label(device),
                         f"{how}, per distinct unit; recompute timed under torch.utils.checkpoint, its premium "
                         f"pooled over the chain", progress, finish=lambda times: pooled_premiums(times, holdout))
