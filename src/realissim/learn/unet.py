"""The velocity network: a 1D temporal convolutional U-Net over an action chunk, conditioned by FiLM on the
flow time and the observation features (the structure of Diffusion Policy's ConditionalUnet1D, smaller).

Why this network (measured on the 2-core CPU, docs/decisions.md "Flow policy network"): at the same loss it
trained faster per step than a transformer of similar size over 32 waypoints, and convolutions over time
keep the waypoints of a chunk smooth.

Shapes: x (B, m, A) a (noisy) chunk of m waypoints with A values each; t (B,) flow time in [0, 1];
cond (B, C) observation features; output (B, m, A) the velocity dx/dt.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional

from realissim.learn.config import UNetConfig
from realissim.learn.layers import Mish


def time_embedding(t: Tensor, dim: int) -> Tensor:
    """Sinusoidal features (B, dim) of flow times t (B,) in [0, 1]: angular frequencies from 1 to 1000 rad."""
    freqs = torch.exp(torch.linspace(0.0, math.log(1000.0), dim // 2, dtype=t.dtype, device=t.device))
    angles = t[:, None] * freqs[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class ConvBlock(nn.Module):
    """Conv1d → GroupNorm → Mish, length preserved: (B, C_in, L) → (B, C_out, L)."""

    def __init__(self, c_in: int, c_out: int, kernel: int, groups: int) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(c_in, c_out, kernel, padding=kernel // 2), nn.GroupNorm(groups, c_out), Mish()
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class FiLMResBlock(nn.Module):
    """Two conv blocks with a FiLM (per-channel scale and shift from the conditioning) between them, plus a
    residual: (B, C_in, L), FiLM terms (B, 2 C_out) → (B, C_out, L). The FiLM terms are `film(c)`, an affine map
    of Mish(c) for the conditioning c = [time features, observation features] (B, D)."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int, kernel: int, groups: int) -> None:
        super().__init__()
        self.first = ConvBlock(c_in, c_out, kernel, groups)
        self.second = ConvBlock(c_out, c_out, kernel, groups)
        self.film = nn.Sequential(Mish(), nn.Linear(cond_dim, 2 * c_out))
        self.skip = nn.Conv1d(c_in, c_out, 1) if c_in != c_out else nn.Identity()

    def film_part(self, features: Tensor, columns: slice, bias: bool) -> Tensor:
        """The FiLM terms' part (N, 2 C_out) from some of the conditioning's features (N, ·), the Linear's input
        `columns` they fill: Mish is elementwise, so `film([time, cond])` is the time features' part plus the
        observation features' (with the bias), to float rounding."""
        linear = self.film[1]
        return functional.linear(self.film[0](features), linear.weight[:, columns], linear.bias if bias else None)

    def forward(self, x: Tensor, film: Tensor) -> Tensor:
        scale, shift = film.unsqueeze(-1).chunk(2, dim=1)
        return self.second(self.first(x) * scale + shift) + self.skip(x)


class Level(nn.Module):
    """One level of the U-Net: two FiLM residual blocks, (B, C_in, L) and their FiLM terms → (B, C_out, L)."""

    def __init__(self, c_in: int, c_out: int, cond_dim: int, config: UNetConfig) -> None:
        super().__init__()
        k, g = config.kernel, config.groups
        self.blocks = nn.ModuleList(
            [FiLMResBlock(c_in, c_out, cond_dim, k, g), FiLMResBlock(c_out, c_out, cond_dim, k, g)]
        )

    def forward(self, x: Tensor, films: Iterator[Tensor]) -> Tensor:
        """`films` yields each block's FiLM terms in turn."""
        for block in self.blocks:
            x = block(x, next(films))
        return x


class ConditionalUNet1D(nn.Module):
    """The velocity field v(x, t | cond): (B, m, A), (B,), (B, C) → (B, m, A). m must be divisible by
    2^(levels − 1)."""

    def __init__(self, action_dim: int, cond_dim: int, config: UNetConfig = UNetConfig()) -> None:
        super().__init__()
        self.config = config
        td, ch = config.time_dim, config.channels
        self.time_mlp = nn.Sequential(nn.Linear(td, 4 * td), Mish(), nn.Linear(4 * td, td))
        d = td + cond_dim
        self.down = nn.ModuleList(
            Level(c_in, c_out, d, config) for c_in, c_out in itertools.pairwise((action_dim, *ch))
        )
        self.downsample = nn.ModuleList(nn.Conv1d(c, c, 3, stride=2, padding=1) for c in ch[:-1])
        self.mid = Level(ch[-1], ch[-1], d, config)
        # Nearest-neighbour upsampling: the next level's convolutions do the mixing, and a transposed
        # convolution cost ~15× more on this CPU (126 vs 7 µs at batch 1, 1.4 vs 0.09 ms at batch 64).
        self.upsample = nn.Upsample(scale_factor=2, mode="nearest")
        self.up = nn.ModuleList(
            Level(c_out + c_in, c_in, d, config) for c_in, c_out in reversed(list(itertools.pairwise(ch)))
        )
        self.head = nn.Sequential(
            ConvBlock(ch[0], ch[0], config.kernel, config.groups), nn.Conv1d(ch[0], action_dim, 1)
        )

    def blocks(self) -> list[FiLMResBlock]:
        """Every FiLM block in the order the forward pass applies them (down levels, middle, up levels)."""
        return [b for level in (*self.down, self.mid, *self.up) for b in level.blocks]  # type: ignore[attr-defined]

    def film(self, t: Tensor, cond: Tensor) -> tuple[Tensor, ...]:
        """Each block's FiLM terms (B, 2 C) (in `blocks` order) for flow times t (B,) and observation features
        cond (B, C_cond)."""
        c = torch.cat([self.time_mlp(time_embedding(t, self.config.time_dim)), cond], dim=-1)
        return tuple(block.film(c) for block in self.blocks())

    def film_cond(self, cond: Tensor) -> tuple[Tensor, ...]:
        """The observation features' part (B, 2 C) of each block's FiLM terms: computed once per chunk when
        sampling, since the features do not change between Euler steps. `film(t, cond)` is
        `film_cond(cond)` + `film_time(t)` to float rounding."""
        columns = slice(self.config.time_dim, None)
        return tuple(block.film_part(cond, columns, bias=True) for block in self.blocks())

    def film_time(self, t: Tensor) -> tuple[Tensor, ...]:
        """The flow time's part (T, 2 C) of each block's FiLM terms for times t (T,) (see `film_cond`)."""
        time = self.time_mlp(time_embedding(t, self.config.time_dim))
        return tuple(block.film_part(time, slice(None, self.config.time_dim), bias=False) for block in self.blocks())

    def forward_film(self, x: Tensor, film: Sequence[Tensor]) -> Tensor:
        """The velocity (B, m, A) of chunks x (B, m, A) given each block's FiLM terms (`film`, `blocks` order)."""
        if x.shape[1] % 2 ** len(self.downsample):
            raise ValueError(f"ConditionalUNet1D: m = {x.shape[1]} is not divisible by 2^{len(self.downsample)}")
        films = iter(film)
        h = x.transpose(1, 2)  # (B, A, m): channels first for Conv1d
        skips = []
        for level, down in zip(self.down, self.downsample):
            h = level(h, films)
            skips.append(h)
            h = down(h)
        h = self.mid(self.down[-1](h, films), films)  # the deepest level continues through the middle, no skip
        for level in self.up:
            h = level(torch.cat([self.upsample(h), skips.pop()], dim=1), films)
        return self.head(h).transpose(1, 2)

    def forward(self, x: Tensor, t: Tensor, cond: Tensor) -> Tensor:
        return self.forward_film(x, self.film(t, cond))


class FilmForward(nn.Module):
    """`net` given its FiLM terms' two parts per block, summed: the observation features' (B, 2 C) and the flow
    time's (1, 2 C) (`film_cond`, `film_time`) → the velocity (B, m, A). A module, so that it can be traced."""

    def __init__(self, net: ConditionalUNet1D) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: Tensor, cond_film: tuple[Tensor, ...], time_film: tuple[Tensor, ...]) -> Tensor:
        return self.net.forward_film(x, tuple(c + f for c, f in zip(cond_film, time_film)))
