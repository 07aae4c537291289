"""Differentiable 3D Gaussian splatting: a PyTorch reference, a fast CPU path (numba) and gsplat on CUDA.

Dependencies point down only: `api` → backends (`reference`, `cpu`, `gsplat_backend`) → `common`.
Nothing here knows about the twin, scenes or MuJoCo; `gaussians` maps body poses to world frames.
"""

from realissim.render.api import Backend, rasterize, render_static, resolve_backend
from realissim.render.common import StaticLayer
from realissim.render.gsplat_backend import gsplat_available

__all__ = ["Backend", "StaticLayer", "gsplat_available", "rasterize", "render_static", "resolve_backend"]
