"""Our Megatron-shaped GPT layer is transformers' GPT2Block (same weights, same math)."""

import pytest
import torch

from models.gpt import GPTLayer


def test_gpt_layer_equals_transformers_gpt2_block():
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    hidden, heads, seq, batch = 32, 4, 10, 3
    config = transformers.GPT2Config(n_embd=hidden, n_head=heads, n_positions=seq, resid_pdrop=0.0,
                                     attn_pdrop=0.0, embd_pdrop=0.0, activation_function="gelu_new")
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    ours = GPTLayer(hidden, heads, dropout=0.0)
    theirs = GPT2Block(config, layer_idx=0)
    with torch.no_grad():
        # HF's Conv1D stores weights as (in, out): the transpose of nn.Linear's.
        for src, dst in [(ours.qkv, theirs.attn.c_attn), (ours.attn_proj, theirs.attn.c_proj),
                         (ours.fc, theirs.mlp.c_fc), (ours.mlp_proj, theirs.mlp.c_proj)]:
            dst.weight.copy_(src.weight.t())
            dst.bias.copy_(src.bias)
        for src, dst in [(ours.ln_1, theirs.ln_1), (ours.ln_2, theirs.ln_2)]:
            dst.weight.copy_(src.weight)
            dst.bias.copy_(src.bias)
    x = torch.randn(batch, seq, hidden)
    causal = torch.full((seq, seq), float("-inf")).triu(1)[None, None]
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours = ours(x1)
    out_theirs = theirs(x2, attention_mask=causal)
    out_theirs = out_theirs[0] if isinstance(out_theirs, tuple) else out_theirs
    torch.testing.assert_close(out_ours, out_theirs, rtol=1e-5, atol=1e-5)
    out_ours.square().sum().backward()
    out_theirs.square().sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours.qkv.weight.grad, theirs.attn.c_attn.weight.grad.t(), rtol=1e-4, atol=1e-5)
