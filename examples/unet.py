"""A timestep-conditioned U-Net, the backbone of diffusion training: `karma profile examples.unet:unet`.

The architecture of DDPM's noise predictor (Ho et al., NeurIPS 2020, Appendix B; the PixelCNN++
U-Net it builds on): residual blocks with group norm and SiLU at each resolution, the timestep's
sinusoidal embedding added inside every block, a downsampling encoder whose every block output is
kept and concatenated into the mirrored decoder block. Self-attention at the low resolutions is
left out. Every decoder block reads an encoder output, so no single tensor carries everything
forward anywhere between the first convolution and the last decoder stage: KARMA cuts it where
the running activation, the timestep embedding and the encoder outputs still to be read cross
(models/auto_chain.py).

A chain maps one tensor to one tensor, so the timestep travels as an extra input channel: the
inputs are `channels + 1` planes, the noisy image and the timestep (constant over the plane); the
target is the noise (the epsilon objective, mean squared error). The contract is
examples/own_model.py's.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

#: DDPM's diffusion steps: timesteps are drawn from 0..STEPS-1
STEPS = 1000


def _groups(channels: int) -> int:
    return math.gcd(32, channels)


class ResBlock(nn.Module):
    """norm-SiLU-conv, plus the projected timestep embedding, norm-SiLU-dropout-conv, plus the
    (projected) input: DDPM's residual block."""

    def __init__(self, cin: int, cout: int, temb: int, dropout: float):
        super().__init__()
        self.norm1 = nn.GroupNorm(_groups(cin), cin)
        self.conv1 = nn.Conv2d(cin, cout, 3, padding=1)
        self.emb = nn.Linear(temb, cout)
        self.norm2 = nn.GroupNorm(_groups(cout), cout)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.emb(F.silu(emb))[:, :, None, None]
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return self.skip(x) + h


class UNet(nn.Module):
    """`levels` resolutions of `blocks` residual blocks each, `width * mult` channels at each."""

    def __init__(self, channels: int, width: int, mults: tuple[int, ...], blocks: int, dropout: float):
        super().__init__()
        self.width = width
        temb = 4 * width
        self.time = nn.Sequential(nn.Linear(width, temb), nn.SiLU(), nn.Linear(temb, temb))
        self.stem = nn.Conv2d(channels, width, 3, padding=1)
        self.down = nn.ModuleList()
        kept = [width]
        c = width
        for level, mult in enumerate(mults):
            for _ in range(blocks):
                self.down.append(ResBlock(c, width * mult, temb, dropout))
                c = width * mult
                kept.append(c)
            if level < len(mults) - 1:
                self.down.append(nn.Conv2d(c, c, 3, stride=2, padding=1))
                kept.append(c)
        self.middle = nn.ModuleList([ResBlock(c, c, temb, dropout), ResBlock(c, c, temb, dropout)])
        self.up = nn.ModuleList()
        for level, mult in reversed(list(enumerate(mults))):
            for _ in range(blocks + 1):
                self.up.append(ResBlock(c + kept.pop(), width * mult, temb, dropout))
                c = width * mult
            if level:
                self.up.append(nn.Upsample(scale_factor=2, mode="nearest"))
                self.up.append(nn.Conv2d(c, c, 3, padding=1))
        self.out = nn.Sequential(nn.GroupNorm(_groups(c), c), nn.SiLU(), nn.Conv2d(c, channels, 3, padding=1))

    def embed(self, t):
        """The timestep's sinusoidal embedding (Vaswani et al. 2017, as DDPM uses it), then an MLP."""
        half = self.width // 2
        freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=t.dtype) / half)
        angles = t[:, None] * freqs[None, :]
        return self.time(torch.cat([angles.sin(), angles.cos()], dim=1))

    def forward(self, inputs):
        x, t = inputs[:, :-1], inputs[:, -1, 0, 0]
        emb = self.embed(t)
        h = self.stem(x)
        kept = [h]
        for layer in self.down:
            h = layer(h, emb) if isinstance(layer, ResBlock) else layer(h)
            kept.append(h)
        for layer in self.middle:
            h = layer(h, emb)
        for layer in self.up:
            h = layer(torch.cat([h, kept.pop()], dim=1), emb) if isinstance(layer, ResBlock) else layer(h)
        return self.out(h)


def unet(channels: int = 3, resolution: int = 32, width: int = 128, mults=(1, 2, 2, 2), blocks: int = 2,
         dropout: float = 0.1):
    """DDPM's CIFAR-10 model by default (width 128, mults 1,2,2,2: 34.2M parameters here, 35.7M in the paper
    with its attention blocks); its LSUN models: resolution 256, mults 1,1,2,2,4,4."""
    mults = tuple(int(m) for m in mults)
    if width % 2:
        raise ValueError(f"width must be even (the timestep embedding's sines and cosines), got {width}")
    if resolution % 2 ** (len(mults) - 1):
        raise ValueError(f"resolution {resolution} must be divisible by {2 ** (len(mults) - 1)} "
                         f"({len(mults)} levels halve it {len(mults) - 1} times)")
    module = UNet(channels, width, mults, blocks, dropout)

    def make_batch(batch, device, seed):
        shape = (batch, channels, resolution, resolution)
        if device.type == "meta":
            return torch.empty((batch, channels + 1, resolution, resolution), device=device), \
                torch.empty(shape, device=device)
        gen = torch.Generator().manual_seed(seed)
        image, noise = torch.randn(shape, generator=gen), torch.randn(shape, generator=gen)
        t = torch.randint(0, STEPS, (batch,), generator=gen)
        alpha_bar = torch.cumprod(1 - torch.linspace(1e-4, 0.02, STEPS), 0)[t][:, None, None, None]
        noisy = alpha_bar.sqrt() * image + (1 - alpha_bar).sqrt() * noise
        plane = t.float()[:, None, None, None].expand(batch, 1, resolution, resolution)
        return torch.cat([noisy, plane], dim=1).to(device), noise.to(device)

    return module, make_batch, F.mse_loss, "adam"
