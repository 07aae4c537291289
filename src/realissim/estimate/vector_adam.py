"""`VectorAdam`: Adam with one second moment per row of each parameter (a body's translation, its rotation
vector, a Gaussian's mean), so each step follows the gradient's direction rather than the nearest diagonal."""

from __future__ import annotations

import torch


class VectorAdam:
    """Adam (β 0.9, 0.999, bias-corrected) with one second moment per row of each parameter: the step of a
    row is lr · m̂ / (sqrt(v̂) + eps) with v̂ the mean square of the row's gradient, so it points along the
    row's (averaged) gradient instead of towards the nearest diagonal."""

    def __init__(self, groups: list[dict], eps: float, betas: tuple[float, float] = (0.9, 0.999)) -> None:
        self.groups, self.eps, self.betas = groups, eps, betas
        self._t = 0
        self._m = [torch.zeros_like(p) for g in groups for p in g["params"]]
        self._v = [torch.zeros_like(p[..., :1]) for g in groups for p in g["params"]]

    def zero_grad(self) -> None:
        for g in self.groups:
            for p in g["params"]:
                p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        self._t += 1
        b1, b2 = self.betas
        i = 0
        for g in self.groups:
            for p in g["params"]:
                grad = torch.zeros_like(p) if p.grad is None else p.grad
                self._m[i].mul_(b1).add_(grad, alpha=1 - b1)
                self._v[i].mul_(b2).add_((grad * grad).mean(dim=-1, keepdim=True), alpha=1 - b2)
                m_hat = self._m[i] / (1 - b1**self._t)
                v_hat = self._v[i] / (1 - b2**self._t)
                p.sub_(g["lr"] * m_hat / (v_hat.sqrt() + self.eps))
                i += 1
