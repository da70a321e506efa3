"""GPT models in Megatron-LM's published configurations (Shoeybi et al. 2019,
Table 1) and Turing-NLG 17B (Microsoft 2020), as a chain: embedding, one unit
per transformer layer, head (final LayerNorm + tied output projection).

The layer is GPT-2's (Radford et al. 2019; Megatron-LM uses the same): pre-LN,
fused QKV projection, causal softmax attention written out (Megatron 2019
materialises the s x s scores, so they count in the activation memory),
4h GELU MLP, dropout 0.1 after attention probabilities, attention output and
MLP output. It is written here rather than imported from transformers because
Megatron's tensor parallelism (baselines/) splits exactly these projections;
tests/models/test_gpt_equivalence.py checks it against transformers' GPT2Block.

Parameters per layer 12h^2 + 13h; embeddings V*h + S*h, the output projection
tied to the token embedding, as Megatron-LM.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.chain import ModelSpec


class GPTEmbedding(nn.Module):
    def __init__(self, vocab: int, hidden: int, seq: int, dropout: float):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.drop = nn.Dropout(dropout)

    def forward(self, tokens):
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        return self.drop(self.wte(tokens) + self.wpe(pos))


class GPTLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, dropout: float):
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden {hidden} not divisible by heads {heads}")
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.attn_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = nn.Linear(4 * hidden, hidden)
        self.attn_drop = nn.Dropout(dropout)
        self.resid_drop = nn.Dropout(dropout)

    def attention(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(h // self.heads)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        probs = self.attn_drop(torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1))
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)
        return self.resid_drop(self.attn_proj(ctx))

    def mlp(self, x):
        return self.resid_drop(self.mlp_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh")))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(x)


class AttentionHalf(nn.Module):
    """``x -> x + attention(ln_1(x))``: the first half of a GPTLayer, holding only its own modules
    (so the weights a half uploads and updates are its own); the residual stream is the boundary."""

    def __init__(self, layer: GPTLayer):
        super().__init__()
        self.heads = layer.heads
        self.ln_1, self.qkv, self.attn_proj = layer.ln_1, layer.qkv, layer.attn_proj
        self.attn_drop, self.resid_drop = layer.attn_drop, layer.resid_drop

    def forward(self, x):
        return x + GPTLayer.attention(self, self.ln_1(x))


class MlpHalf(nn.Module):
    """``x -> x + mlp(ln_2(x))``: the second half of a GPTLayer."""

    def __init__(self, layer: GPTLayer):
        super().__init__()
        self.ln_2, self.fc, self.mlp_proj, self.resid_drop = layer.ln_2, layer.fc, layer.mlp_proj, layer.resid_drop

    def forward(self, x):
        return x + GPTLayer.mlp(self, x)


class GPTHead(nn.Module):
    """Final LayerNorm and the output projection, tied to the token embedding."""

    def __init__(self, hidden: int, embedding: nn.Embedding):
        super().__init__()
        self.ln_f = nn.LayerNorm(hidden)
        self.wte = embedding

    def forward(self, x):
        return F.linear(self.ln_f(x), self.wte.weight)


class GPT(nn.Module):
    def __init__(self, vocab: int, hidden: int, layers: int, heads: int, seq: int, dropout: float = 0.1):
        super().__init__()
        self.embedding = GPTEmbedding(vocab, hidden, seq, dropout)
        self.layers = nn.ModuleList(GPTLayer(hidden, heads, dropout) for _ in range(layers))
        self.head = GPTHead(hidden, self.embedding.wte)

    def forward(self, tokens):
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def build(vocab: int, hidden: int, layers: int, heads: int, seq: int, dropout: float = 0.1, **_) -> nn.Module:
    return GPT(vocab, hidden, layers, heads, seq, dropout)


def units(model: GPT) -> list[tuple[str, nn.Module]]:
    chain: list[tuple[str, nn.Module]] = [("embedding", model.embedding)]
    chain += [(f"layer{i}", layer) for i, layer in enumerate(model.layers)]
    chain.append(("head", model.head))
    return chain


def layer_units(model: GPT) -> list[tuple[str, nn.Module]]:
    """Each transformer layer as its attention and MLP halves (docs/profiles.md, *Granularity*): the
    residual stream between them is one tensor, so the halves need no multi-tensor boundary."""
    chain: list[tuple[str, nn.Module]] = [("embedding", model.embedding)]
    for i, layer in enumerate(model.layers):
        chain += [(f"layer{i}_attention", AttentionHalf(layer)), (f"layer{i}_mlp", MlpHalf(layer))]
    chain.append(("head", model.head))
    return chain


def make_batch(config, batch, device, seed):
    """Random token ids; targets are the inputs shifted by one (next-token LM)."""
    seq, vocab = config["seq"], config["vocab"]
    if device.type == "meta":
        ids = torch.empty((batch, seq), dtype=torch.long, device=device)
        return ids, torch.empty_like(ids)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, seq + 1), generator=gen)
    return ids[:, :-1].contiguous().to(device), ids[:, 1:].contiguous().to(device)


def lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


SMALL = {"vocab": 2048, "hidden": 256, "layers": 6, "heads": 4, "seq": 128}
TINY = {"vocab": 128, "hidden": 32, "layers": 2, "heads": 2, "seq": 16}


def _spec(name, hidden, heads, layers, batch, params, source, description) -> ModelSpec:
    paper = {"vocab": 51200, "hidden": hidden, "layers": layers, "heads": heads, "seq": 1024}
    return ModelSpec(
        name=name,
        description=description,
        source=source,
        sizes={"paper": paper, "small": SMALL, "tiny": TINY},
        batch={"paper": batch, "small": 2, "tiny": 2},
        build=build,
        units=units,
        layer_units=layer_units,
        make_batch=make_batch,
        loss=lm_loss,
        optimizer="adam",
        published_params=params,
    )


MEGATRON = "Shoeybi et al. 2019 (Megatron-LM), Table 1; vocab 51,200 (padded), seq 1024"
GPT_SPECS = [
    _spec("megatron-1.2b", 1536, 16, 40, 2, 1.2e9, MEGATRON, "Megatron-LM GPT-2 1.2B (h 1536, 40 layers)"),
    _spec("megatron-2.5b", 1920, 20, 54, 1, 2.5e9, MEGATRON, "Megatron-LM GPT-2 2.5B (h 1920, 54 layers)"),
    _spec("megatron-4.2b", 2304, 24, 64, 1, 4.2e9, MEGATRON, "Megatron-LM GPT-2 4.2B (h 2304, 64 layers)"),
    _spec("megatron-8.3b", 3072, 32, 72, 1, 8.3e9, MEGATRON, "Megatron-LM GPT-2 8.3B (h 3072, 72 layers)"),
    _spec("turing-nlg-17b", 4256, 28, 78, 1, 17.2e9,
          "Microsoft Turing-NLG blog (2020): h 4256, 28 heads, 78 layers; 17.2B as in Smith et al. 2022 "
          "(MT-NLG), Table 1",
          "Turing-NLG 17B (h 4256, 78 layers)"),
]
