"""Where a measured step and its prediction differ, term by term (the first step of finding the
performance model's error on the plans a search picks; docs/runtime.md, "Measured against predicted").

Both timelines are in the simulator's format (`karma.sim.schedule.Event`): the runtime records the
compute thread's work per block and every copy the link runs, the simulator every operation of every
queue. The step's time splits exactly along the compute queue:

    step = forward + backward (with recomputes) + device optimizer step       (compute busy)
         + waits between compute operations                                   (stalls on copies)
         + before the first and after the last compute operation              (start, tail)

so the differences of the terms add up to the difference of the step times. The runtime times a
recompute inside its block's backward (torch.utils.checkpoint runs it there), so the two are one term.
A host optimizer's updates overlap the backward; what is left of them after it is in the tail (the
runtime records that wait as `host optimizer (wait)`). Beside the terms, the busy time of every other
queue (copies each way, host updates) and the blocks whose compute differs most, so that a difference
can be traced to a unit or a copy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import pandas as pd

from karma.sim.schedule import Event

#: compute operations, by the term they count in
COMPUTE_TERMS = {"forward": "forward", "backward": "backward and recompute", "recompute": "backward and recompute",
                 "optimizer step": "device optimizer step"}
#: the order terms are printed in
TERMS = ("forward", "backward and recompute", "device optimizer step", "waits between compute operations",
         "before the first compute operation", "after the last compute operation")


def step_terms(timeline: Iterable[Event], step_time: float) -> dict[str, float]:
    """The step's time split into TERMS (seconds). Compute is one in-order queue in both sources, so its
    operations do not overlap and the values add up to `step_time`."""
    compute = sorted((e for e in timeline if e.resource == "compute" and e.op in COMPUTE_TERMS),
                     key=lambda e: (e.start, e.end))
    terms = dict.fromkeys(TERMS, 0.0)
    if not compute:
        terms["after the last compute operation"] = step_time
        return terms
    covered = compute[0].start
    for e in compute:
        terms[COMPUTE_TERMS[e.op]] += e.end - e.start
        if e.start > covered:
            terms["waits between compute operations"] += e.start - covered
        covered = max(covered, e.end)
    terms["before the first compute operation"] = compute[0].start
    terms["after the last compute operation"] = step_time - covered
    return terms


def busy(timeline: Iterable[Event]) -> dict[str, float]:
    """Seconds each queue other than compute is busy, per queue and operation (`h2d: prefetch`)."""
    out: dict[str, float] = defaultdict(float)
    for e in timeline:
        if e.resource != "compute":
            out[f"{e.resource}: {e.op}"] += e.end - e.start
    return dict(out)


def attribute(measured: Iterable[Event], measured_time: float, simulated: Iterable[Event],
              simulated_time: float) -> pd.DataFrame:
    """Rows (kind, term, measured_s, simulated_s, difference_s, share): the step's terms, whose
    differences add up to the step's, then the busy time of every other queue (`kind` 'busy'). `share`
    is a term's part of the step's difference (terms only)."""
    measured, simulated = list(measured), list(simulated)
    mine, theirs = step_terms(measured, measured_time), step_terms(simulated, simulated_time)
    gap = measured_time - simulated_time
    rows = [("step", "step", measured_time, simulated_time, gap, 1.0 if gap else 0.0)]
    for term in TERMS:
        diff = mine[term] - theirs[term]
        rows.append(("term", term, mine[term], theirs[term], diff, diff / gap if gap else 0.0))
    m, s = busy(measured), busy(simulated)
    for queue in sorted(set(m) | set(s)):
        a, b = m.get(queue, 0.0), s.get(queue, 0.0)
        rows.append(("busy", queue, a, b, a - b, float("nan")))
    return pd.DataFrame(rows, columns=["kind", "term", "measured_s", "simulated_s", "difference_s", "share"])


def block_differences(measured: Iterable[Event], simulated: Iterable[Event], most: int = 5) -> pd.DataFrame:
    """The `most` blocks whose compute (forward; backward with recompute) differs most in seconds."""
    def per_block(timeline):
        out: dict[tuple[str, int], float] = defaultdict(float)
        for e in timeline:
            if e.resource == "compute" and e.op in ("forward", "backward", "recompute"):
                out[(COMPUTE_TERMS[e.op], e.block)] += e.end - e.start
        return out

    m, s = per_block(measured), per_block(simulated)
    rows = [(term, block, m.get((term, block), 0.0), s.get((term, block), 0.0))
            for term, block in sorted(set(m) | set(s), key=lambda x: (x[1], x[0]))]
    table = pd.DataFrame(rows, columns=["term", "block", "measured_s", "simulated_s"])
    table["difference_s"] = table.measured_s - table.simulated_s
    return table.reindex(table.difference_s.abs().sort_values(ascending=False).index).head(most)


def report(table: pd.DataFrame, blocks: pd.DataFrame) -> str:
    """The attribution as text: terms with their share of the difference, other queues, the blocks."""
    lines = [f"  {'term':40s} {'measured':>10s} {'predicted':>10s} {'difference':>11s} {'share':>7s}"]
    for r in table.itertuples():
        share = "" if r.kind == "busy" else f"{r.share:7.0%}"
        name = r.term if r.kind != "busy" else f"busy {r.term}"
        lines.append(f"  {name:40s} {r.measured_s:9.4f}s {r.simulated_s:9.4f}s {r.difference_s:+10.4f}s {share}")
    if len(blocks):
        lines.append("  blocks whose compute differs most: " + ", ".join(
            f"{r.term} of block {r.block} {r.difference_s:+.4f}s" for r in blocks.itertuples()))
    return "\n".join(lines)
