"""Layers shared by the policy's networks."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional


class Mish(nn.Module):
    """Mish, x · tanh(softplus(x)), elementwise, any shape: the same function as `torch.nn.Mish` (equal to float32
    rounding, ~2e-7 on a chunk), composed of two vectorised kernels, which on this CPU take ~60 % of the
    time of ATen's single Mish kernel (measured on (20, 64, 16) activations; docs/decisions.md, "Offline
    evaluation reaches 5×"). No parameters: checkpoints written with `torch.nn.Mish` load unchanged."""

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.tanh(functional.softplus(x))
