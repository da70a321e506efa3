"""Any module as a chain: trace it, cut it where one tensor, or else the fewest bytes, carry everything forward.

KARMA plans over a chain of units (models/chain.py). The zoo splits its models
by hand; this module does it for any traceable model, as rotor (Beaumont et
al. 2019) and Checkmate (Jain et al. 2020) linearise graphs:

1. **Trace** the model on the device it is built on: `torch.fx.symbolic_trace`
   (module-level graph; leaf modules such as BatchNorm keep their own state),
   or `torch.export` (ATen-level graph, non-strict) where fx fails, as for
   transformers' models (data-dependent Python in their forward). Nothing is
   allocated on the meta device, so a 7B decoder traces in seconds.
2. **Boundaries.** A node depends on the data if the model input reaches it;
   everything else (parameters, buffers, masks and positions computed from
   static shapes) is *free*: a unit that needs it recomputes it, and a plain
   value fixed by the static shapes (`x.shape`) is a constant. At each point in
   graph order the boundary is the data nodes read after it (`find_cuts`).
3. **Cuts.** Pieces end where the boundary is one tensor. A span between two
   such cuts that holds more than 1/MIN_UNITS of the forward time or saved
   bytes (a U-Net, an encoder-decoder, a long residual) is cut inside too, at
   the narrowest boundaries near equal shares (`_narrow_cuts`); its skips ride
   along in every boundary they cross until their last reader.
4. **Units.** The nodes between two cuts become one `AutoUnit` (an fx
   GraphModule) whose attributes are the original's modules, parameters and
   buffers themselves, so training the chain trains the original; a weight
   used on both sides of a cut (a tied embedding and head) is one Parameter
   in two units, as the zoo's GPT does, and a tensor computed from weights
   alone that several units read is computed once and handed on.
5. **Merging.** Beyond `units=N` pieces (`DEFAULT_UNITS` by default),
   neighbours are merged into N units balanced over the whole chain: the
   largest unit is as small as any contiguous grouping allows, and the rest
   take equal shares. A unit's load is the larger of its share of the forward
   time (FLOPs and bytes on a V100-like roofline, counted on fake tensors)
   and its share of the bytes saved for backward, so no unit holds a large
   part of either.

A graph with no point where only tensors cross (a tuple or a list read across
every point, or only views beside other tensors) is refused with a one-line
`KarmaError` naming what crosses.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import fx, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from karma.core.aten import NO_KERNEL, SIZE_QUERIES
from karma.core.errors import KarmaError
from models.boundary import nbytes

#: Pieces are merged to at most this many units unless `units` is given: one or two units per layer
#: of a transformer of up to 96 layers (a layer has two pieces, attention and MLP), every residual
#: block of the torchvision CNNs.
DEFAULT_UNITS = 96
#: A span that no single-tensor cut splits is cut inside, at boundaries of several tensors, when it holds
#: more than 1/MIN_UNITS of the forward time or of the saved bytes: otherwise a planner would have fewer
#: than this many units to choose among there. Residual blocks of the torchvision CNNs and the layers
#: of a transformer stay whole; a U-Net between its first and last stage, an encoder-decoder or a long
#: residual (one span holding nearly all of the model) are cut.
MIN_UNITS = 4
#: Roofline of the balancing cost (a V100's FP32 rate and memory bandwidth, plus a launch).
_FLOPS, _BW, _LAUNCH = 15e12, 900e9, 5e-6
#: Nodes dropped from traced graphs: export's dtype/device assertions (they would fail under autocast).
_DROP = {"aten._assert_tensor_metadata", "aten._assert_scalar", "aten.sym_constrain_range_for_size"}


class AutoUnit(fx.GraphModule):
    """One unit of an automatic chain. Its repr is its canonical code (operations, module reprs,
    attribute shapes, without the original's names), so identical layers profile once
    (karma.profile.trace.unit_signature)."""

    signature: str = ""
    #: how many pieces (spans between two cuts) it merges: a unit of one piece cannot be split further
    pieces: int = 1
    #: it has a shape value written in (`_build_unit`): it runs at the traced batch only
    fixed_shapes: bool = False

    def __repr__(self) -> str:
        return f"AutoUnit({self.signature})"


def trace(module: nn.Module, example: torch.Tensor) -> tuple[fx.GraphModule, str]:
    """(graph module, how it was traced): torch.fx first, torch.export on failure."""
    try:
        return fx.symbolic_trace(module), "torch.fx"
    except Exception as fx_error:  # noqa: BLE001 - any tracing failure falls back to export
        try:
            program = torch.export.export(module, (example,), strict=False)
        except Exception as err:  # noqa: BLE001
            raise KarmaError(f"cannot trace {type(module).__name__}: torch.fx: {_first_line(fx_error)}; "
                             f"torch.export: {_first_line(err)}") from None
        return program.module(), "torch.export"


def _first_line(err: Exception) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


class _Cost(torch.utils._python_dispatch.TorchDispatchMode):
    """Forward FLOPs and bytes of each operator, on fake tensors."""

    def __init__(self):
        super().__init__()
        self.seconds = 0.0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        if func.is_view or func in SIZE_QUERIES or func.namespace == "prim" or str(packet) in NO_KERNEL:
            return out
        try:
            flops = flop_registry[packet](*args, **kwargs, out_val=out) if packet in flop_registry else 0
        except Exception:  # noqa: BLE001 - a formula that does not apply: count bytes only
            flops = 0
        tensors = [t for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor)]
        moved = sum(t.numel() * t.element_size() for t in tensors)
        self.seconds += _LAUNCH + max(flops / _FLOPS, moved / _BW)
        return out


class _Propagate(fx.Interpreter):
    """Runs the graph on fake tensors: each node's value in meta['val'], its forward cost in
    meta['cost'] and the bytes autograd saves for its backward in meta['saved'] (each storage once,
    to the first node that saves it; weights are not activations). Fake tensors, so a real
    model's BatchNorm statistics are not touched and nothing is allocated."""

    def __init__(self, gm, mode):
        super().__init__(gm)
        self.mode = mode
        self.seen: set[int] = set()

    def run_node(self, n):
        out, n.meta["cost"], n.meta["saved"] = self.costed(super().run_node, n)
        n.meta["val"] = out
        return out

    def costed(self, fn, *args):
        """fn(*args) on fake tensors, with its forward cost (s) and the bytes autograd saves for it."""
        cost = _Cost()
        saved = 0

        def pack(t: torch.Tensor) -> torch.Tensor:
            nonlocal saved
            key = t.untyped_storage()._cdata
            if not _is_weight(t) and key not in self.seen:
                self.seen.add(key)
                saved += t.untyped_storage().nbytes()
            return t

        with self.mode, cost, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = fn(*args)
        return out, cost.seconds, saved


def _is_weight(t: torch.Tensor) -> bool:
    """A parameter, or a view of one (a linear layer's backward saves its weight, transposed)."""
    base = t if t._base is None else t._base
    return base.is_leaf and base.requires_grad


def _propagate(gm: fx.GraphModule, example: torch.Tensor, tail: Callable | None = None) -> None:
    """Fake values and costs of every node (`_Propagate`). `tail(output)` (the loss) runs last and its
    cost is the final node's too: the chain's last unit computes it."""
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        fake = mode.from_tensor(example)
    run = _Propagate(gm, mode)
    try:
        run.run(fake)
        (output,) = [n for n in gm.graph.nodes if n.op == "output"]
        final = tree_flatten(output.args)[0]
        if tail is not None and len(final) == 1 and isinstance(final[0], fx.Node):
            _, cost, saved = run.costed(tail, final[0].meta["val"])
            final[0].meta["cost"] += cost
            final[0].meta["saved"] += saved
    except Exception as err:  # noqa: BLE001
        raise KarmaError(f"cannot run the traced graph on fake tensors: {_first_line(err)}") from None


def _clean(gm: fx.GraphModule) -> None:
    for n in reversed(list(gm.graph.nodes)):
        dropped = (n.op == "call_function" and str(getattr(n.target, "_overloadpacket", "")) in _DROP) or \
            (n.op == "call_module" and n.target == "_guards_fn")  # export's input guards: shapes are static
        if dropped and not n.users:
            gm.graph.erase_node(n)
    gm.graph.lint()


def _is_constant(value) -> bool:
    """A plain number fixed by the static shapes (a size, a tuple of them): every unit that reads it
    takes the value itself, so it never has to cross a cut. Not a dtype or a device: under autocast or
    on another device a unit must read the tensor's own."""
    if isinstance(value, (tuple, list)):
        return all(_is_constant(v) for v in value)
    return isinstance(value, (bool, int, float, torch.Size, slice))


def _constants(gm: fx.GraphModule) -> dict[fx.Node, object]:
    """Nodes whose value is a constant (`_is_constant`) and that write nothing: `x.shape[-2:]` in a
    segmentation head depends on the input's shape only, which the trace fixed."""
    out = {}
    for n in gm.graph.nodes:
        if n.op in ("call_function", "call_method") and n.target is not operator.setitem and \
                _is_constant(n.meta.get("val")):
            out[n] = n.meta["val"]
    return out


@dataclass(frozen=True)
class Cuts:
    """The graph's data nodes in order and where a unit may end.

    `live[p]`: the data nodes the rest of the graph reads after `order[p]` runs (in graph order): a
    unit that ends at position p hands them on, its boundary. `valid[p]`: a unit may end there: the
    boundary is tensors no later operation writes into, none of them a view unless it is alone, and
    order[p] is neither the input nor the output. `width[p]`: its bytes, each storage once."""

    order: list[fx.Node]
    live: list[tuple[fx.Node, ...]]
    valid: list[bool]
    width: list[int]
    final: int
    #: data nodes after the output in graph order (dead branches with side effects): the last unit runs them
    rest: list[fx.Node]

    def single(self, p: int) -> bool:
        """The boundary at p is the one tensor order[p] made (a cut of a chain in the plain sense)."""
        return self.valid[p] and self.live[p] == (self.order[p],)


def find_cuts(gm: fx.GraphModule, model_name: str, constants: dict[fx.Node, object]) -> Cuts:
    """Every point in graph order and what would cross a cut there (`Cuts`)."""
    nodes = list(gm.graph.nodes)
    inputs = [n for n in nodes if n.op == "placeholder"]
    if len(inputs) != 1:
        raise KarmaError(f"{model_name}: the traced graph takes {len(inputs)} inputs; a chain takes one tensor")
    (output,) = [n for n in nodes if n.op == "output"]
    outs = [a for a in tree_flatten(output.args)[0] if isinstance(a, fx.Node)]
    if len(outs) != 1 or not isinstance(outs[0].meta.get("val"), torch.Tensor):
        raise KarmaError(f"{model_name}: the model returns {len(outs)} values; a chain's last unit returns one "
                         f"tensor (the loss's input)")
    final = outs[0]
    index = {n: i for i, n in enumerate(nodes)}
    data = set(inputs)
    for n in nodes:
        if n.op not in ("placeholder", "output") and n not in constants and any(a in data for a in n.all_input_nodes):
            data.add(n)
    if final not in data:
        raise KarmaError(f"{model_name}: its output does not depend on its input")
    order = [n for n in nodes if n in data]
    last_use = {n: max((index[u] for u in n.users if u not in constants), default=index[n]) for n in order}
    tensor = {n: isinstance(n.meta.get("val"), torch.Tensor) and not _written_in_place(n, gm) for n in order}
    # no view beside other tensors in a boundary: the next unit's leaf copy of it would no longer share its
    # base's storage (BERT's attention heads, views of one projection)
    owner = {n: tensor[n] and n.meta["val"]._base is None for n in order}
    live, valid, width = [], [], []
    alive: dict[fx.Node, None] = {}
    for n in order:
        alive[n] = None
        for held in [h for h in alive if last_use[h] <= index[n]]:
            del alive[held]
        here = tuple(alive)
        live.append(here)
        ok = bool(here) and all(tensor[h] for h in here) and n.op != "placeholder" and n is not final and \
            (len(here) == 1 or all(owner[h] for h in here))
        valid.append(ok)
        width.append(nbytes(tuple(h.meta["val"] for h in here)) if ok else 0)
        if n is final:
            break
    rest = order[len(live):]
    return Cuts(order[:len(live)], live, valid, width, len(live) - 1, rest)


def refuse(cuts: Cuts, model_name: str) -> KarmaError:
    """The one-line refusal of a graph with no point where tensors alone carry everything forward: it
    names what crosses the most would-be cuts and is no tensor, or is written into later."""
    counts: dict[fx.Node, int] = {}
    for p in range(1, cuts.final):
        for h in cuts.live[p]:
            if not isinstance(h.meta.get("val"), torch.Tensor):
                counts[h] = counts.get(h, 0) + 1
    if not counts:
        return KarmaError(f"{model_name} cannot be cut into units: its graph has no point between two operations "
                          f"where only tensors that no later operation writes into carry everything forward")
    held = max(counts, key=counts.get)
    kind = type(held.meta.get("val")).__name__
    return KarmaError(f"{model_name} cannot be cut into units: '{held.name}' (from {_where(held)}, a {kind}, not a "
                      f"tensor) is read across {counts[held]} of its {cuts.final - 1} would-be cuts")


def _combined(cuts: Cuts) -> list[float]:
    """Per data node, its share of the forward time plus its share of the saved bytes (the merge's
    two measures, `_measures`), the weight by which pieces are balanced."""
    shares = []
    for key in ("cost", "saved"):
        values = [float(n.meta.get(key, 0)) for n in cuts.order]
        total = sum(values)
        if total > 0:
            shares.append([v / total for v in values])
    return [sum(v) for v in zip(*shares, strict=True)] if shares else [1.0] * len(cuts.order)


def _narrow_cuts(cuts: Cuts, weights: list[float], lo: int, hi: int, parts: int) -> list[int]:
    """Up to `parts - 1` positions in (lo, hi) splitting that span into about equal shares of
    `weights`: each the narrowest valid cut (fewest boundary bytes) within half a share of its ideal
    place, the nearest to it among equals. A skip crossing the span is in every candidate's
    boundary, so the choice turns on what else crosses: between two layers of a U-Net's stage
    little, inside one of them its intermediate tensors too."""
    prefix = list(itertools.accumulate(weights[lo + 1:hi + 1], initial=0.0))
    total = prefix[-1]
    if parts < 2 or total <= 0:
        return []
    share = total / parts
    chosen = []
    for j in range(1, parts):
        ideal = share * j
        first = max(lo + bisect.bisect_left(prefix, ideal - share / 2), lo + 1, chosen[-1] + 1 if chosen else 0)
        last = min(lo + bisect.bisect_right(prefix, ideal + share / 2) - 1, hi - 1)
        window = [p for p in range(first, last + 1) if cuts.valid[p]]
        if window:
            chosen.append(min(window, key=lambda p: (cuts.width[p], abs(prefix[p - lo] - ideal))))
    return chosen


def find_pieces(gm: fx.GraphModule, model_name: str, units: int,
                constants: dict[fx.Node, object]) -> tuple[list[list[fx.Node]], list[tuple[fx.Node, ...]], fx.Node]:
    """(data nodes of each piece, the nodes each piece hands on, the graph's input node).

    Pieces end first where one tensor carries everything forward (`Cuts.single`). A span no such cut
    splits that holds more than `1 / MIN_UNITS` of the forward time or of the saved bytes (a U-Net
    between its first and last stage, an encoder-decoder, a long residual) is split further, into
    pieces of about a unit's share (`1 / units`), at the narrowest cuts near each share's end
    (`_narrow_cuts`): their boundaries carry the skips across them."""
    cuts = find_cuts(gm, model_name, constants)
    ends = [p for p in range(cuts.final) if cuts.single(p)]
    weights = _combined(cuts)
    measures = [[float(n.meta.get(key, 0)) for n in cuts.order] for key in ("cost", "saved")]
    totals = [sum(m) for m in measures]
    refined = []
    for lo, hi in zip([0, *ends], [*ends, cuts.final], strict=True):
        share = max((sum(m[lo + 1:hi + 1]) / t for m, t in zip(measures, totals, strict=True) if t > 0),
                    default=0.0)
        if share > 1 / MIN_UNITS:
            refined += _narrow_cuts(cuts, weights, lo, hi, math.ceil(share * units))
    ends = sorted(set(ends) | set(refined))
    if not any(cuts.valid):
        raise refuse(cuts, model_name)
    pieces, bounds, lo = [], [], 0
    for p in [*ends, cuts.final]:
        pieces.append(cuts.order[lo + 1:p + 1])
        bounds.append(cuts.live[p] if p != cuts.final else (cuts.order[cuts.final],))
        lo = p
    pieces[-1].extend(cuts.rest)
    return pieces, bounds, cuts.order[0]


_IN_PLACE_OPS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.iand, operator.ior}
#: operations whose result may be a view of their first argument (an in-place write through it writes
#: into the argument): EfficientNet's classifier flattens, then drops out in place
_VIEW_NAMES = {"flatten", "view", "view_as", "reshape", "squeeze", "unsqueeze", "transpose", "permute", "t",
               "expand", "narrow", "unflatten", "contiguous", "detach", "getitem", "select", "split", "chunk"}


def _view_of(user: fx.Node, n: fx.Node, gm: fx.GraphModule) -> bool:
    if not user.args or user.args[0] is not n:
        return False
    if user.op == "call_module":
        return type(gm.get_submodule(user.target)).__name__ in ("Flatten", "Unflatten", "Identity")
    name = user.target if user.op == "call_method" else getattr(user.target, "__name__", "")
    return str(name).split(".")[-1] in _VIEW_NAMES


def _written_in_place(n: fx.Node, gm: fx.GraphModule) -> bool:
    """Some later op writes into `n`, directly or through views of it: a unit must not start at `n`."""
    return any(_in_place_on(u, n, gm) or (_view_of(u, n, gm) and _written_in_place(u, gm)) for u in n.users)


def _in_place_on(user: fx.Node, n: fx.Node, gm: fx.GraphModule) -> bool:
    """`user` writes into `n` (ReLU(inplace=True), x += y, x.relu_()): a unit must not start there, its
    input would be a leaf the next unit's in-place write is refused on."""
    if not user.args or user.args[0] is not n:
        return False
    if user.op == "call_module":
        return bool(getattr(gm.get_submodule(user.target), "inplace", False))
    if user.kwargs.get("inplace"):
        return True
    if user.op == "call_method":
        return user.target.endswith("_") and not user.target.startswith("_")
    if user.op == "call_function":
        if user.target in _IN_PLACE_OPS:
            return True
        schema = getattr(user.target, "_schema", None)
        if schema is not None:
            return bool(schema.arguments) and schema.arguments[0].alias_info is not None and \
                schema.arguments[0].alias_info.is_write
        name = getattr(user.target, "__name__", "")
        return name.endswith("_") and not name.startswith("_")
    return False


def _where(n: fx.Node) -> str:
    stack = n.meta.get("nn_module_stack") or {}
    if stack:
        return list(stack.values())[-1][0] or n.name
    return str(n.target) if n.op in ("call_module", "get_attr") else n.name


def _fold_free(pieces, ends):
    """Pieces that run no kernel (views, aliases, a cast to the same type) join the next piece: a
    unit whose output is a view of its input would hand the same storage on twice."""
    out_pieces, out_ends, carry = [], [], []
    for k, (piece, end) in enumerate(zip(pieces, ends, strict=True)):
        carry = carry + piece
        if sum(n.meta.get("cost", 0.0) for n in piece) > 0 or k == len(pieces) - 1:
            out_pieces.append(carry)
            out_ends.append(end)
            carry = []
    return out_pieces, out_ends


def _merge(measures: Sequence[Sequence[float]], target: int) -> list[tuple[int, int]]:
    """`min(target, pieces)` contiguous groups (start, stop) of the pieces, where `measures` holds one
    sequence per measure (forward time, saved bytes), each with a value per piece.

    A group's load is its largest share of any measure's total. The largest load over the groups is
    the least any contiguous grouping reaches (the linear partition problem, in several measures:
    bisection on the cap over a greedy check, since the fewest groups under a cap is what a greedy
    fill gives); each cut is then placed as near as that cap allows to an equal share of what remains
    (`_share`), so no group takes a remainder at either end. O(m log m) per bisection step."""
    m = len(measures[0])
    if target >= m:
        return [(i, i + 1) for i in range(m)]
    shares = []
    for values in measures:
        total = float(sum(values))
        if total > 0:
            shares.append([v / total for v in values])
    if not shares:
        shares = [[1.0 / m] * m]
    prefixes = [list(itertools.accumulate(v, initial=0.0)) for v in shares]
    slack = 1e-12

    def reach(j: int, cap: float) -> int:
        """The furthest stop of a group that starts at piece j and stays under `cap` in every measure."""
        return max(min(bisect.bisect_right(p, p[j] + cap + slack) - 1 for p in prefixes), j + 1)

    def fewest(cap: float) -> list[int]:
        """need[j]: the fewest groups under `cap` that cover pieces j.. (each group as long as it may)."""
        need = [0] * (m + 1)
        for j in range(m - 1, -1, -1):
            need[j] = need[reach(j, cap)] + 1
        return need

    lo, hi = max(max(v) for v in shares), 1.0
    while hi - lo > slack:
        mid = (lo + hi) / 2
        if fewest(mid)[0] <= target:
            hi = mid
        else:
            lo = mid
    need = fewest(hi)
    weights = [sum(v) for v in zip(*shares, strict=True)]
    prefix = list(itertools.accumulate(weights, initial=0.0))
    groups = []
    start = 0
    for k in range(target - 1):
        left = target - k - 1  # groups after this one
        first = next(j for j in range(start + 1, m + 1) if need[j] <= left)
        last = min(reach(start, hi), m - left)
        ideal = prefix[start] + _share(weights[start:], left + 1)
        j = min(max(bisect.bisect_left(prefix, ideal), first), last)
        if j > first and abs(prefix[j - 1] - ideal) <= abs(prefix[j] - ideal):
            j -= 1
        groups.append((start, j))
        start = j
    groups.append((start, m))
    return groups


def _share(weights: Sequence[float], groups: int) -> float:
    """The weight each of `groups` groups would take of `weights` if pieces heavier than the share
    stood alone (water-filling): a heavy head must not make its neighbours' groups heavier."""
    rest, n = float(sum(weights)), groups
    for w in sorted(weights, reverse=True):
        if n <= 1 or w <= rest / n:
            break
        rest, n = rest - w, n - 1
    return rest / n


def _build_unit(root: nn.Module, nodes: list[fx.Node], inputs: tuple[fx.Node, ...], outputs: tuple[fx.Node, ...],
                constants: dict[fx.Node, object], everywhere: set[fx.Node]) -> AutoUnit:
    """The unit running `nodes`: it takes the boundary `inputs` (one tensor, or a tuple of them in
    graph order, models/boundary.py) and returns `outputs` the same way; a tensor of both (a skip
    riding along) is handed on as it came. A constant (`_constants`) is computed where the tensor
    it reads is at hand, and written in as its value where it is not. `everywhere`: the graph's data
    nodes (those of other units are not at hand here)."""
    graph = fx.Graph()
    x = graph.placeholder("x")
    env: dict[fx.Node, fx.Node] = {inputs[0]: x} if len(inputs) == 1 else \
        {n: graph.call_function(operator.getitem, (x, k)) for k, n in enumerate(inputs)}
    data = set(nodes)
    at_hand: dict[fx.Node, bool] = {}

    def computable(n: fx.Node) -> bool:
        if n in env or n in data:
            return True
        if n in everywhere:
            return False
        if n not in at_hand:  # free nodes (parameters, masks from static shapes) are recomputed here
            at_hand[n] = n.op not in ("placeholder", "output") and all(computable(a) for a in n.all_input_nodes)
        return at_hand[n]

    written: list[fx.Node] = []

    def arg(a: fx.Node):
        if a in constants and not computable(a):
            written.append(a)
            return constants[a]
        return copy(a)

    def copy(n: fx.Node) -> fx.Node:
        if n not in env:
            env[n] = graph.node_copy(n, arg)
        return env[n]

    for n in nodes:
        copy(n)
    graph.output(env[outputs[0]] if len(outputs) == 1 else tuple(env[n] for n in outputs))
    unit = AutoUnit(root, graph)
    unit.signature = _signature(unit)
    unit.fixed_shapes = bool(written)
    return unit


def _weight_tensors_shared(gm: fx.GraphModule, members: list[list[fx.Node]], data: set[fx.Node],
                           constants: dict[fx.Node, object]) -> dict[fx.Node, tuple[int, int]]:
    """Tensors computed from weights alone that several units read (T5's relative position bias,
    computed once and added in every layer), with the first and last unit reading each. They are
    computed once, by the first, and handed on in the boundaries to the last, as the original
    computes them: recomputed in each unit, their weights' gradient would be summed per unit, not
    once, and training would no longer equal the original's bit for bit."""
    weighty: dict[fx.Node, bool] = {}

    def from_weights(n: fx.Node) -> bool:
        if n not in weighty:
            if n.op == "get_attr":
                weighty[n] = isinstance(_get_attr(gm, n.target), nn.Parameter)
            elif n.op == "call_module" and any(True for _ in gm.get_submodule(n.target).parameters()):
                weighty[n] = n not in data
            else:
                weighty[n] = n not in data and n not in constants and n.op != "placeholder" and \
                    any(from_weights(a) for a in n.all_input_nodes)
        return weighty[n]

    readers: dict[fx.Node, set[int]] = {}
    for u, nodes in enumerate(members):
        seen: set[fx.Node] = set()
        todo = [a for n in nodes for a in n.all_input_nodes]
        while todo:
            a = todo.pop()
            if a in seen or a in data or a in constants or a.op in ("placeholder", "get_attr"):
                continue
            seen.add(a)
            readers.setdefault(a, set()).add(u)
            todo += a.all_input_nodes
    shared = {n for n, us in readers.items() if len(us) > 1 and from_weights(n)
              and isinstance(n.meta.get("val"), torch.Tensor) and n.meta["val"].is_floating_point()}
    return {n: (min(readers[n]), max(readers[n])) for n in shared if not any(u in shared for u in n.users)}


def _signature(unit: fx.GraphModule) -> str:
    names: dict[str, str] = {}
    lines = []
    for n in unit.graph.nodes:
        names[n.name] = f"v{len(names)}"

        def arg(a):
            return names[a.name] if isinstance(a, fx.Node) else repr(a)

        args = fx.node.map_aggregate(n.args, lambda a: arg(a) if isinstance(a, fx.Node) else a)
        kwargs = fx.node.map_aggregate(n.kwargs, lambda a: arg(a) if isinstance(a, fx.Node) else a)
        if n.op == "call_module":
            target = repr(unit.get_submodule(n.target))
        elif n.op == "get_attr":
            t = _get_attr(unit, n.target)
            target = (f"{tuple(t.shape)}:{t.dtype}:{isinstance(t, nn.Parameter)}" if isinstance(t, torch.Tensor)
                      else type(t).__name__)
        else:
            target = getattr(n.target, "__name__", str(n.target)) if n.op == "call_function" else str(n.target)
        lines.append(f"{n.op} {target} {args} {kwargs}")
    return str(hash("\n".join(lines)) & 0xFFFFFFFFFFFF) + f":{len(lines)}"


def _get_attr(module: nn.Module, target: str):
    for part in target.split("."):
        module = getattr(module, part)
    return module


def _name(unit: AutoUnit, nodes: list[fx.Node], taken: set[str]) -> str:
    """The longest module path common to what the unit uses (`layer3_4`), or its first operation."""
    paths = [n.target if n.op == "call_module" else n.target.rpartition(".")[0]
             for n in unit.graph.nodes if n.op in ("call_module", "get_attr")]
    parts = [p.split(".") for p in paths if p]
    common: list[str] = []
    for level in zip(*parts, strict=False):
        if len(set(level)) != 1:
            break
        common.append(level[0])
    if common[:1] == ["model"] and isinstance(unit, AutoUnit) and hasattr(unit, "model"):
        common = common[1:]  # the wrapper around a transformers model (models.specs.LMLogits)
    base = re.sub(r"\W", "_", "_".join(common)) or nodes[0].name
    name, i = base, 1
    while name in taken or hasattr(nn.Sequential, name):  # `to`, `train`: a module's own attributes
        i += 1
        name = f"{base}_{i}"
    taken.add(name)
    return name


def _measures(pieces: list[list[fx.Node]]) -> list[list[float]]:
    """Per piece, its forward time and the bytes it saves for backward: a planner needs units that are
    short and whose saved bytes are small against the capacity, so both weigh in the merge."""
    return [[float(sum(n.meta.get(key, 0) for n in piece)) for piece in pieces] for key in ("cost", "saved")]


def auto_units(module: nn.Module, example: torch.Tensor, units: int | None = None,
               name: str = "model", loss: Callable | None = None) -> tuple[list[tuple[str, nn.Module]], str]:
    """The chain of `module` on input `example` (on the module's device, meta included) as
    (unit name, unit) pairs sharing the module's parameters, and how it was traced.
    `units`: merge the pieces into that many units (`DEFAULT_UNITS` if None), balanced in forward
    time and saved bytes (`_merge`); a chain of fewer pieces keeps one unit per piece. `loss(output)`,
    if given, is costed with the last piece, as the last unit runs it."""
    if units is not None and units < 1:
        raise KarmaError(f"units must be a positive integer, got {units}")
    gm, how = trace(module, example)
    _clean(gm)
    _propagate(gm, example, loss)
    target = units if units is not None else DEFAULT_UNITS
    constants = _constants(gm)
    pieces, ends, inp = find_pieces(gm, name, target, constants)
    everywhere = {inp, *(n for piece in pieces for n in piece)}
    pieces, ends = _fold_free(pieces, ends)
    groups = _merge(_measures(pieces), target)
    members = [[n for piece in pieces[a:b] for n in piece] for a, b in groups]
    carried = _weight_tensors_shared(gm, members, everywhere, constants)
    index = {n: i for i, n in enumerate(gm.graph.nodes)}
    chain: list[tuple[str, nn.Module]] = []
    taken: set[str] = set()
    for u, ((a, b), nodes) in enumerate(zip(groups, members, strict=True)):
        start = (inp,) if a == 0 else ends[a - 1]
        stop = ends[b - 1]
        ride_in = [n for n, (first, last) in carried.items() if first < u <= last]
        ride_out = [n for n, (first, last) in carried.items() if first <= u < last]
        unit = _build_unit(gm, nodes, tuple(sorted({*start, *ride_in}, key=index.get)),
                           tuple(sorted({*stop, *ride_out}, key=index.get)), constants, everywhere)
        unit.pieces = b - a
        chain.append((_name(unit, nodes, taken), unit))
    return chain, how

