"""Merge consecutive units into groups, so that the planner searches a short chain.

A merged unit has the sum of its units' times, FLOPs and weights, their own
saved bytes (a tensor shared inside the group counted once), the group's
input and output, the largest forward workspace of its units, and a backward
workspace chosen so that its backward transient (output gradient + input
gradient + workspace) is the largest of its units'.
Simulating the merged chain is conservative: its activations are freed at
the end of the group's backward rather than unit by unit.
"""

from __future__ import annotations

from dataclasses import replace

from karma.profile.profile import Profile, UnitProfile, backward_transient, output_gradient_bytes


def merge(profile: Profile, start: int, stop: int) -> UnitProfile:
    units = profile.units[start:stop]
    first, last = units[0], units[-1]
    visible = {sid for sid, _ in last.boundary_out} | {sid for sid, _ in profile.units[start - 1].boundary_out
                                                       if start}
    own = sum(u.saved_bytes for u in units) - sum(profile.shared_boundary_bytes(i) for i in range(start, stop - 1))
    transient = max(backward_transient(profile.units, i) for i in range(start, stop))
    grad_out = output_gradient_bytes(profile.units, stop - 1)  # as backward_transient
    return UnitProfile(
        name=f"{first.name}..{last.name}" if stop - start > 1 else first.name,
        forward_time=sum(u.forward_time for u in units),
        backward_time=sum(u.backward_time for u in units),
        # recomputed as one: every unit but the last inside the segment
        recompute_extra_time=sum(u.recompute_inner_extra_time for u in units[:-1]) + last.recompute_extra_time,
        recompute_inner_extra_time=sum(u.recompute_inner_extra_time for u in units),
        forward_flops=sum(u.forward_flops for u in units),
        backward_flops=sum(u.backward_flops for u in units),
        forward_bytes=sum(u.forward_bytes for u in units),
        backward_bytes=sum(u.backward_bytes for u in units),
        saved_bytes=own,
        saved_input_bytes=first.saved_input_bytes,
        saved_output_bytes=last.saved_output_bytes,
        input_bytes=first.input_bytes,
        output_bytes=last.output_bytes,
        param_bytes=sum(u.param_bytes for u in units),
        tied_param_bytes=sum(u.tied_param_bytes for u in units),
        shared_param_bytes=sum(u.shared_param_bytes for u in units),
        buffer_bytes=sum(u.buffer_bytes for u in units),
        optimizer_bytes=sum(u.optimizer_bytes for u in units),
        workspace_bytes=max(u.workspace_bytes for u in units),
        backward_workspace_bytes=transient - grad_out - (first.input_bytes - first.grad_reused_bytes if start else 0),
        grad_alias_bytes=first.grad_alias_bytes,
        grad_reused_bytes=first.grad_reused_bytes,
        # boundary storages (layer granularity): the group's output, and what its units save of the
        # group's input and output (a storage inside the group is its own saved bytes, counted apart)
        boundary_out=last.boundary_out,
        boundary_saved=tuple(dict.fromkeys(sid for u in units for sid in u.boundary_saved if sid in visible)),
        # a merged backward frees its saved tensors at its end (conservative); one unit is itself
        input_grad_last=first.input_grad_last and stop - start == 1,
        recompute_remakes_output=last.recompute_remakes_output,
        # the units' noise is independent: spreads add in quadrature
        forward_spread=sum(u.forward_spread ** 2 for u in units) ** 0.5,
        backward_spread=sum(u.backward_spread ** 2 for u in units) ** 0.5,
        holdout=_merged_holdout(units),
    )


def _merged_holdout(units) -> tuple[float, ...]:
    """The held-out times of a merged unit, summed as the times are (merge); none unless every unit has them."""
    if not all(u.holdout for u in units):
        return ()
    return (sum(u.holdout[0] for u in units), sum(u.holdout[1] for u in units),
            sum(u.holdout[3] for u in units[:-1]) + units[-1].holdout[2], sum(u.holdout[3] for u in units))


def balanced_groups(profile: Profile, count: int) -> list[tuple[int, int]]:
    """Cut the chain into at most `count` runs of about equal forward+backward time."""
    return _balanced([u.forward_time + u.backward_time for u in profile.units], count)


def clean_cuts(profile: Profile) -> list[tuple[int, int]]:
    """The chain cut only where a boundary carries at most one tensor: between residual blocks (or
    transformer layers) of a layer chain, every unit boundary of a block chain (its boundaries name no
    storages). A group cut inside a block carries the skip beside the running output (a recomputed group's
    checkpoint is both, and both stay alive across it), so merged groups that end there cost memory a
    block plan does not."""
    runs, start = [], 0
    for i, u in enumerate(profile.units):
        if len(u.boundary_out) <= 1 or i == len(profile.units) - 1:
            runs.append((start, i + 1))
            start = i + 1
    return runs


def block_groups(profile: Profile, count: int) -> list[tuple[int, int]]:
    """At most `count` groups of about equal forward+backward time, each a run of whole `clean_cuts` runs:
    a block chain's `balanced_groups`; a layer chain's residual blocks (merged where there are more than
    `count`), so that its coarse search starts from the plans of the block chain."""
    runs = clean_cuts(profile)
    times = [sum(u.forward_time + u.backward_time for u in profile.units[a:b]) for a, b in runs]
    return [(runs[a][0], runs[b - 1][1]) for a, b in _balanced(times, count)]


def _balanced(times: list[float], count: int) -> list[tuple[int, int]]:
    """Index runs [a, b) over `times`, at most `count`, each about an equal share of their sum."""
    n = len(times)
    if n <= count:
        return [(i, i + 1) for i in range(n)]
    total = sum(times)
    groups, start, acc = [], 0, 0.0
    for i, t in enumerate(times):
        acc += t
        remaining_groups = count - len(groups) - 1
        if (acc >= total * (len(groups) + 1) / count or n - i - 1 <= remaining_groups) and remaining_groups > 0 \
                and i + 1 < n:
            groups.append((start, i + 1))
            start = i + 1
    groups.append((start, n))
    return groups


def halve(profile: Profile, groups: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Each group of two or more units cut in two of about equal forward+backward time:
    the next finer level of the planner's search, whose cuts include the coarser ones."""
    out = []
    for a, b in groups:
        if b - a < 2:
            out.append((a, b))
            continue
        times = [u.forward_time + u.backward_time for u in profile.units[a:b]]
        total, acc, cut, gap = sum(times), 0.0, a + 1, float("inf")
        for i, t in enumerate(times[:-1]):
            acc += t
            if abs(2 * acc - total) < gap:
                cut, gap = a + i + 1, abs(2 * acc - total)
        out += [(a, cut), (cut, b)]
    return out


def coarsen(profile: Profile, groups: list[tuple[int, int]]) -> Profile:
    return replace(profile, units=tuple(merge(profile, a, b) for a, b in groups))
