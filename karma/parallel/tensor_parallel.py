"""Megatron-style tensor parallelism for the GPT layers of the zoo (Shoeybi et al. 2019, Sec. 3).

One transformer layer is split over the `tp` ranks of a tensor-parallel group:

* attention: the fused QKV projection is column-parallel by heads (rank r holds the
  q, k and v rows of heads r*n/tp .. (r+1)*n/tp - 1), each rank attends over its heads,
  and the output projection is row-parallel (the columns that read those heads);
* MLP: the first linear layer is column-parallel (4h/tp rows), GELU is applied to the
  shard, the second is row-parallel.

Megatron's two conjugate operators join the shards: ``f`` (identity forward, all-reduce
of the gradient backward) before each column-parallel layer and ``g`` (all-reduce
forward, identity backward) after each row-parallel one; the row-parallel biases are
added once, after the all-reduce. So each layer all-reduces a (batch, seq, hidden)
tensor twice in the forward and twice in the backward (Megatron-LM Fig. 4). LayerNorm,
the residual stream and (here) the embedding and output head are replicated: every
rank of the group computes them identically, so their gradients agree without
communication. Megatron also splits the embedding over the vocabulary; the cost model
(karma/parallel/megatron_model.py) can count it that way, the real runner keeps it replicated.

With ``comm=None`` both operators are the identity: that is how a shard is profiled on
the meta device (one rank's compute and memory, the communication costed apart).
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from karma.core.errors import KarmaError
from models.chain import sequential
from models.gpt import GPTLayer

# mpi4py is imported inside the functions that run under MPI: importing it starts MPI.


def check_degree(tp: int, hidden: int, heads: int) -> None:
    """A degree that does not divide the heads (and so the hidden size) is refused in one line."""
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise KarmaError(f"tensor-parallel degree must be a positive integer, got {tp!r}")
    if heads % tp or hidden % tp:
        divisors = [d for d in range(1, heads + 1) if heads % d == 0 and hidden % d == 0]
        raise KarmaError(f"tensor-parallel degree {tp} does not divide the {heads} heads and hidden size {hidden}; "
                         f"valid degrees: {', '.join(map(str, divisors))}")


def _allreduce(comm, x: torch.Tensor) -> torch.Tensor:
    from mpi4py import MPI

    out = x.detach().contiguous().clone()
    comm.Allreduce(MPI.IN_PLACE, out, op=MPI.SUM)
    return out


class _CopyToGroup(torch.autograd.Function):
    """Megatron's f: identity forward, all-reduce of the gradient backward."""

    @staticmethod
    def forward(ctx, x, comm):
        ctx.comm = comm
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return _allreduce(ctx.comm, grad), None


class _ReduceFromGroup(torch.autograd.Function):
    """Megatron's g: all-reduce forward, identity backward."""

    @staticmethod
    def forward(ctx, x, comm):
        return _allreduce(comm, x)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_group(x: torch.Tensor, comm) -> torch.Tensor:
    return x if comm is None else _CopyToGroup.apply(x, comm)


def reduce_from_group(x: torch.Tensor, comm) -> torch.Tensor:
    return x if comm is None else _ReduceFromGroup.apply(x, comm)


class TPLayer(nn.Module):
    """One rank's shard of models.gpt.GPTLayer (same forward as the unsplit layer once the
    group's shards are summed; see the module docstring)."""

    #: all-reduces of a (batch, seq, hidden) tensor per layer, forward and backward
    ALLREDUCES_FORWARD = 2
    ALLREDUCES_BACKWARD = 2

    def __init__(self, hidden: int, heads: int, tp: int, dropout: float, comm=None):
        super().__init__()
        check_degree(tp, hidden, heads)
        self.hidden, self.heads, self.tp, self.comm = hidden, heads // tp, tp, comm
        self.head_dim = hidden // heads
        local = hidden // tp
        self.ln_1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * local)
        self.attn_proj = nn.Linear(local, hidden, bias=False)
        self.attn_bias = nn.Parameter(torch.zeros(hidden))
        self.ln_2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * local)
        self.mlp_proj = nn.Linear(4 * local, hidden, bias=False)
        self.mlp_bias = nn.Parameter(torch.zeros(hidden))
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)

    def attention(self, x):
        b, s, _ = x.shape
        local = self.heads * self.head_dim
        q, k, v = self.qkv(copy_to_group(x, self.comm)).split(local, dim=2)
        q, k, v = (t.view(b, s, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        probs = self.attn_drop(torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1))
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, local)
        return self.resid_drop(reduce_from_group(self.attn_proj(ctx), self.comm) + self.attn_bias)

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        hidden = F.gelu(self.fc(copy_to_group(self.ln_2(x), self.comm)), approximate="tanh")
        mlp = reduce_from_group(self.mlp_proj(hidden), self.comm) + self.mlp_bias
        return x + self.resid_drop(mlp)


def _rows(rank: int, tp: int, n: int) -> slice:
    per = n // tp
    return slice(rank * per, (rank + 1) * per)


@torch.no_grad()
def shard_layer(layer: nn.Module, rank: int, tp: int, comm=None) -> TPLayer:
    """Rank `rank`'s TPLayer holding copies of its slices of a full GPTLayer's weights."""
    h = layer.ln_1.normalized_shape[0]
    with torch.device(layer.qkv.weight.device):  # on meta: no allocation, no initialisation
        shard = TPLayer(h, layer.heads, tp, layer.attn_drop.p, comm)
    cols = _rows(rank, tp, h)
    qkv_rows = torch.cat([torch.arange(h)[cols] + j * h for j in range(3)])
    shard.qkv.weight.copy_(layer.qkv.weight[qkv_rows])
    shard.qkv.bias.copy_(layer.qkv.bias[qkv_rows])
    shard.attn_proj.weight.copy_(layer.attn_proj.weight[:, cols])
    shard.attn_bias.copy_(layer.attn_proj.bias)
    fc_rows = _rows(rank, tp, 4 * h)
    shard.fc.weight.copy_(layer.fc.weight[fc_rows])
    shard.fc.bias.copy_(layer.fc.bias[fc_rows])
    shard.mlp_proj.weight.copy_(layer.mlp_proj.weight[:, fc_rows])
    shard.mlp_bias.copy_(layer.mlp_proj.bias)
    for name in ("ln_1", "ln_2"):
        getattr(shard, name).load_state_dict(getattr(layer, name).state_dict())
    return shard


def gather_layer(shard: TPLayer, comm, grads: bool = False) -> dict[str, torch.Tensor]:
    """The full GPTLayer state (or its gradients) rebuilt from the group's shards, on every rank."""
    def get(p):
        return (p.grad if grads else p).detach().contiguous()

    def cat(p, dim):
        parts = comm.allgather(get(p))
        return torch.cat(parts, dim=dim)

    h, tp = shard.hidden, shard.tp
    qkv_w = [t.split(h // tp, dim=0) for t in comm.allgather(get(shard.qkv.weight))]
    qkv_b = [t.split(h // tp) for t in comm.allgather(get(shard.qkv.bias))]
    state = {
        "qkv.weight": torch.cat([qkv_w[r][j] for j in range(3) for r in range(tp)], dim=0),
        "qkv.bias": torch.cat([qkv_b[r][j] for j in range(3) for r in range(tp)]),
        "attn_proj.weight": cat(shard.attn_proj.weight, 1),
        "attn_proj.bias": get(shard.attn_bias),
        "fc.weight": cat(shard.fc.weight, 0),
        "fc.bias": cat(shard.fc.bias, 0),
        "mlp_proj.weight": cat(shard.mlp_proj.weight, 1),
        "mlp_proj.bias": get(shard.mlp_bias),
    }
    for name in ("ln_1", "ln_2"):
        ln = getattr(shard, name)
        state[f"{name}.weight"], state[f"{name}.bias"] = get(ln.weight), get(ln.bias)
    return state


def shard_chain(chain, rank: int, tp: int, comm=None):
    """A ChainModel like `chain` (a GPT of the zoo) whose transformer layers are rank `rank`'s
    TPLayer shards; the embedding and head units are the same (replicated) modules. With tp=1
    it is `chain` itself (nothing to split)."""
    layers = [m for m in chain.units if isinstance(m, GPTLayer)]
    if not layers:
        raise KarmaError(f"{chain.name} has no transformer layers to split; tensor parallelism is for the GPT models")
    check_degree(tp, layers[0].ln_1.normalized_shape[0], layers[0].heads)
    if tp == 1:
        return chain
    units = [(name, shard_layer(m, rank, tp, comm) if isinstance(m, GPTLayer) else m)
             for name, m in chain.units.named_children()]
    return replace(chain, units=sequential(units))
