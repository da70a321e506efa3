"""Any module as a chain: trace it, cut it where one tensor carries everything forward.

KARMA plans over a chain of units (models/chain.py). The zoo splits its models
by hand; this module does it for any traceable model, as rotor (Beaumont et
al. 2019) and Checkmate (Jain et al. 2020) linearise graphs:

1. **Trace** the model on the device it is built on: `torch.fx.symbolic_trace`
   (module-level graph; leaf modules such as BatchNorm keep their own state),
   or `torch.export` (ATen-level graph, non-strict) where fx fails, as for
   transformers' models (data-dependent Python in their forward). Nothing is
   allocated on the meta device, so a 7B decoder traces in seconds.
2. **Cut vertices.** A node depends on the data if the model input reaches it;
   everything else (parameters, buffers, masks and positions computed from
   static shapes) is *free*: a unit that needs it recomputes it. In graph
   order, a data node v is a cut when no data node before v is used after v:
   then v's output, one tensor, is all the rest of the model reads.
3. **Units.** The nodes between two cuts become one `AutoUnit` (an fx
   GraphModule) whose attributes are the original's modules, parameters and
   buffers themselves, so training the chain trains the original; a weight
   used on both sides of a cut (a tied embedding and head) is one Parameter
   in two units, as the zoo's GPT does.
4. **Merging.** Beyond `units=N` pieces (`DEFAULT_UNITS` by default),
   neighbours are merged into N units balanced over the whole chain: the
   largest unit is as small as any contiguous grouping allows, and the rest
   take equal shares. A unit's load is the larger of its share of the forward
   time (FLOPs and bytes on a V100-like roofline, counted on fake tensors)
   and its share of the bytes saved for backward, so no unit holds a large
   part of either.

A model without a cut (an encoder-decoder whose decoder reads the encoder's
output in every layer, a U-Net's long skips) is refused with a one-line
`KarmaError` naming the tensor that crosses every would-be cut.
"""

from __future__ import annotations

import bisect
import itertools
import operator
import re
from collections.abc import Callable, Sequence

import torch
from torch import fx, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import flop_registry

from karma.core.aten import NO_KERNEL, SIZE_QUERIES
from karma.core.errors import KarmaError

#: Pieces are merged to at most this many units unless `units` is given: one or two units per layer
#: of a transformer of up to 96 layers (a layer has two pieces, attention and MLP), every residual
#: block of the torchvision CNNs.
DEFAULT_UNITS = 96
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


def find_pieces(gm: fx.GraphModule, model_name: str) -> tuple[list[list[fx.Node]], list[fx.Node], fx.Node]:
    """(data nodes of each piece, the node each piece hands on, the graph's input node)."""
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
        if n.op not in ("placeholder", "output") and any(a in data for a in n.all_input_nodes):
            data.add(n)
    if final not in data:
        raise KarmaError(f"{model_name}: its output does not depend on its input")
    order = [n for n in nodes if n in data]
    last_use = {n: max((index[u] for u in n.users), default=index[n]) for n in order}
    cuts = []
    reach = -1  # the latest use of any data node before the current one
    blocker: fx.Node | None = None
    longest: fx.Node | None = None
    for n in order:
        if n is final:
            break
        if reach <= index[n] and isinstance(n.meta.get("val"), torch.Tensor) and n.op != "placeholder" and \
                not _written_in_place(n, gm):
            cuts.append(n)
        if last_use[n] > reach:
            reach, blocker = last_use[n], n
        if longest is None or last_use[n] - index[n] > last_use[longest] - index[longest]:
            longest = n
    if not cuts:
        held = longest or blocker
        what = "its input" if held is None or held.op == "placeholder" else f"'{held.name}' (from {_where(held)})"
        user = max(held.users, key=index.get, default=None) if held is not None else None
        at = f" by '{user.name}'" if user is not None else ""
        raise KarmaError(f"{model_name} cannot be a chain: no point in its graph where a single tensor carries "
                         f"everything forward ({what} is read again{at}, near its end)")
    pieces: list[list[fx.Node]] = [[]]
    ends: list[fx.Node] = []
    for n in order[1:]:
        if n.op == "output":
            continue
        pieces[-1].append(n)
        if n in cuts:
            ends.append(n)
            pieces.append([])
    ends.append(final)
    if not pieces[-1]:  # the output node itself was a cut (cannot happen: loop breaks at final)
        pieces.pop()
        ends.pop()
    rest = [n for n in order[1:] if n.op != "output" and index[n] > index[final]]
    if rest:  # data nodes after the output (dead branches with side effects): run them with the last unit
        pieces[-1].extend(rest)
    return pieces, ends, inputs[0]


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
    for piece, end in zip(pieces, ends, strict=True):
        carry = carry + piece
        if sum(n.meta.get("cost", 0.0) for n in piece) > 0 or end is ends[-1]:
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


def _build_unit(root: nn.Module, nodes: list[fx.Node], inp: fx.Node, out: fx.Node) -> AutoUnit:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {inp: graph.placeholder("x")}

    def copy(n: fx.Node) -> fx.Node:
        if n not in env:
            for a in n.all_input_nodes:  # free nodes (parameters, shapes' constants) are recomputed here
                copy(a)
            env[n] = graph.node_copy(n, lambda a: env[a])
        return env[n]

    for n in nodes:
        copy(n)
    graph.output(env[out])
    unit = AutoUnit(root, graph)
    unit.signature = _signature(unit)
    return unit


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
    while name in taken:
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
    pieces, ends, inp = find_pieces(gm, name)
    pieces, ends = _fold_free(pieces, ends)
    groups = _merge(_measures(pieces), units if units is not None else DEFAULT_UNITS)
    chain: list[tuple[str, nn.Module]] = []
    taken: set[str] = set()
    for a, b in groups:
        nodes = [n for piece in pieces[a:b] for n in piece]
        start = inp if a == 0 else ends[a - 1]
        unit = _build_unit(gm, nodes, start, ends[b - 1])
        unit.pieces = b - a
        chain.append((_name(unit, nodes, taken), unit))
    return chain, how

