"""The rasteriser: image formation against closed forms, the fast CPU path against the reference."""

from __future__ import annotations

import math

import pytest
import torch

from realissim.render import rasterize, render_static
from realissim.render.common import EPS2D
from realissim.render.reference import project
from realissim.render.synthetic import cameras, random_gaussians

BACKENDS = ["reference", "cpu"]


def _one(mean, scale=(0.03, 0.02, 0.01), color=(1.0, 0.0, 0.0), opacity=0.8, dtype=torch.float64):
    t = lambda x: torch.tensor(x, dtype=dtype)  # noqa: E731
    return t([mean]), t([[1.0, 0.0, 0.0, 0.0]]), t([scale]), t([color]), t([opacity])


def test_projection_matches_closed_form() -> None:
    Ks, X_WCs = cameras(1, 64, 48, torch.float64)
    x, y, z = 0.1, -0.05, 2.0
    s = (0.03, 0.02, 0.01)
    means, quats, scales, _, _ = _one((x, y, z), s)
    proj = project(means, quats, scales, Ks, X_WCs, 64, 48, 0.01, 100.0)
    f, cx, cy = Ks[0, 0, 0].item(), Ks[0, 0, 2].item(), Ks[0, 1, 2].item()
    assert proj.mean2d[0, 0].tolist() == pytest.approx([f * x / z + cx, f * y / z + cy])
    a = (f / z) ** 2 * s[0] ** 2 + (f * x / z**2) ** 2 * s[2] ** 2 + 0.3
    b = (f * x / z**2) * (f * y / z**2) * s[2] ** 2
    c = (f / z) ** 2 * s[1] ** 2 + (f * y / z**2) ** 2 * s[2] ** 2 + 0.3
    assert proj.cov2d[0, 0].flatten().tolist() == pytest.approx([a, b, b, c])
    det = a * c - b * b
    assert proj.conic[0, 0].tolist() == pytest.approx([c / det, -b / det, a / det])
    assert proj.depth[0, 0].item() == pytest.approx(z)


@pytest.mark.parametrize("eps2d", [EPS2D, 0.01])
@pytest.mark.parametrize("backend", BACKENDS)
def test_single_gaussian_alpha_is_the_2d_gaussian(backend: str, eps2d: float) -> None:
    """The rendered alpha is the projected 2D Gaussian, low-passed by `eps2d` px² (the twin's views use less)."""
    Ks, X_WCs = cameras(1, 64, 48, torch.float64)
    g = _one((0.05, 0.02, 1.5), (0.06, 0.04, 0.01), opacity=0.7)
    proj = project(*g[:3], Ks, X_WCs, 64, 48, 0.01, 100.0, eps2d)
    assert proj.cov2d[0, 0, 0, 0].item() - project(*g[:3], Ks, X_WCs, 64, 48, 0.01, 100.0, 0.0).cov2d[
        0, 0, 0, 0
    ].item() == pytest.approx(eps2d)
    _, alpha, depth = rasterize(*g, Ks, X_WCs, 64, 48, backend=backend, eps2d=eps2d)
    (mx, my), cov = proj.mean2d[0, 0], proj.cov2d[0, 0]
    inv = torch.linalg.inv(cov)
    radius = math.ceil(3 * math.sqrt(torch.linalg.eigvalsh(cov).max().item()))
    for px, py in [(int(mx), int(my)), (int(mx) + 2, int(my) - 1), (int(mx) - 4, int(my) + 3)]:
        d = torch.tensor([px + 0.5, py + 0.5], dtype=torch.float64) - proj.mean2d[0, 0]
        expected = 0.7 * math.exp(-0.5 * (d @ inv @ d).item())
        assert max(abs(d[0].item()), abs(d[1].item())) <= radius
        assert alpha[0, py, px].item() == pytest.approx(expected, rel=1e-9)
        assert depth[0, py, px].item() == pytest.approx(1.5)
    far = int(mx) + radius + 2
    if far < 64:
        assert alpha[0, int(my), far].item() == 0.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_near_gaussian_occludes_far_one_whatever_the_order(backend: str) -> None:
    Ks, X_WCs = cameras(1, 48, 36, torch.float64)
    near = _one((0.0, 0.0, 1.0), (0.1, 0.1, 0.1), (1.0, 0.0, 0.0), 0.99)
    far = _one((0.0, 0.0, 2.0), (0.1, 0.1, 0.1), (0.0, 1.0, 0.0), 0.99)
    images = []
    for first, second in ((near, far), (far, near)):
        args = [torch.cat([a, b]) for a, b in zip(first, second)]
        rgb, _, depth = rasterize(*args, Ks, X_WCs, 48, 36, backend=backend)
        images.append(rgb)
        red, green = rgb[0, 18, 24, 0].item(), rgb[0, 18, 24, 1].item()
        assert red > 0.9 and green < 0.08
        assert depth[0, 18, 24].item() == pytest.approx(1.0, abs=0.08)
    torch.testing.assert_close(images[0], images[1], rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gaussians_behind_or_outside_contribute_nothing(backend: str) -> None:
    Ks, X_WCs = cameras(1, 40, 30, torch.float64)
    base = random_gaussians(30, seed=1, dtype=torch.float64)
    hidden = [_one((0.0, 0.0, -1.0), (0.3, 0.3, 0.3), opacity=0.9), _one((50.0, 0.0, 2.0), (0.1, 0.1, 0.1))]
    hidden.append(_one((0.0, 0.0, 0.005), (0.1, 0.1, 0.1)))  # nearer than the near plane
    args = [torch.cat([a, *(h[i] for h in hidden)]).requires_grad_() for i, a in enumerate(base)]
    rgb, alpha, depth = rasterize(*args, Ks, X_WCs, 40, 30, backend=backend)
    ref = rasterize(*base, Ks, X_WCs, 40, 30, backend=backend)
    for got, want in zip((rgb, alpha, depth), ref):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    (rgb.sum() + alpha.sum()).backward()
    for t in args:
        assert torch.all(t.grad[30:] == 0)


def _loss(rgb, alpha, depth, seed: int):
    g = torch.Generator().manual_seed(seed)
    w = [torch.rand(x.shape, generator=g, dtype=torch.float64).to(x.dtype) for x in (rgb, alpha, depth)]
    return (rgb * w[0]).sum() + (alpha * w[1]).sum() + 0.1 * (depth * w[2]).sum()


@pytest.mark.parametrize("backend", BACKENDS)
def test_gradcheck_tiny_scene(backend: str) -> None:
    """Finite differences on a float64 scene whose footprints cover the whole small image."""
    Ks, X_WCs = cameras(2, 10, 8, torch.float64)
    means, quats, scales, colors, opac = random_gaussians(4, seed=3, dtype=torch.float64, spread=0.15)
    scales = scales * 3

    def fn(m, q, s, c, o):
        return rasterize(m, q, s, c, o, Ks, X_WCs, 10, 8, background=torch.tensor([0.1, 0.2, 0.3]), backend=backend)

    inputs = [t.clone().requires_grad_() for t in (means, quats, scales, colors, opac)]
    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-5, rtol=1e-4)


def _render_with_grads(backend: str, inputs, Ks, X_WCs, w, h, dtype, seed=0, **kw):
    params = [t.to(dtype).clone().requires_grad_() for t in inputs]
    out = rasterize(*params, Ks.to(dtype), X_WCs.to(dtype), w, h, backend=backend, **kw)
    _loss(*out, seed=seed).backward()
    return out, [p.grad for p in params]


@pytest.mark.parametrize(("seed", "eps2d"), [(0, EPS2D), (1, EPS2D), (2, EPS2D), (0, 0.01)])
def test_cpu_matches_reference(seed: int, eps2d: float) -> None:
    w, h = 64, 48
    Ks, X_WCs = cameras(2, w, h, torch.float64)
    scene = random_gaussians(300, seed=seed, dtype=torch.float64)
    bg = torch.rand(2, h, w, 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    ref, ref_grads = _render_with_grads("reference", scene, Ks, X_WCs, w, h, torch.float64, background=bg, eps2d=eps2d)
    for dtype, atol, gtol in ((torch.float64, 1e-10, 1e-8), (torch.float32, 2e-5, 2e-4)):
        out, grads = _render_with_grads("cpu", scene, Ks, X_WCs, w, h, dtype, background=bg, eps2d=eps2d)
        for got, want in zip(out, ref):
            torch.testing.assert_close(got.double(), want, rtol=0, atol=atol * max(1.0, want.abs().max().item()))
        for name, got, want in zip(("means", "quats", "scales", "colors", "opacities"), grads, ref_grads):
            rel = ((got.double() - want).norm() / want.norm()).item()
            assert rel < gtol, f"{name}: relative gradient error {rel:.2e} ({dtype})"


def test_cpu_is_deterministic_across_thread_counts() -> None:
    w, h = 64, 48
    Ks, X_WCs = cameras(1, w, h)
    scene = random_gaussians(400, seed=5)
    threads = torch.get_num_threads()
    try:
        results = []
        for n in (1, 2, 2):
            torch.set_num_threads(n)
            results.append(_render_with_grads("cpu", scene, Ks, X_WCs, w, h, torch.float32))
    finally:
        torch.set_num_threads(threads)
    for out, grads in results[1:]:
        for got, want in zip([*out, *grads], [*results[0][0], *results[0][1]]):
            assert torch.equal(got, want)


def _table_scene(dtype: torch.dtype):
    """Flat opaque 'table' Gaussians on z = 0 and smaller Gaussians above it, seen from above at an angle.

    The objects float high enough (≥ 6 cm) that, at every pixel, they come before the table's
    Gaussians in centre-depth order too, so the static layer must reproduce the full render.
    """
    g = torch.Generator().manual_seed(7)
    xs, ys = torch.meshgrid(torch.linspace(-0.5, 0.5, 41), torch.linspace(-0.5, 0.5, 41), indexing="ij")
    n = xs.numel()
    table = (
        torch.stack([xs.flatten(), ys.flatten(), torch.zeros(n)], dim=1),
        torch.tensor([[1.0, 0.0, 0.0, 0.0]]).expand(n, 4).clone(),
        torch.tensor([[0.015, 0.015, 0.001]]).expand(n, 3).clone(),
        torch.rand(n, 3, generator=g) * 0.3 + 0.4,
        torch.full((n,), 0.95),
    )
    m = 120
    objs = (
        torch.cat([(torch.rand(m, 2, generator=g) - 0.5) * 0.5, 0.06 + 0.1 * torch.rand(m, 1, generator=g)], dim=1),
        torch.nn.functional.normalize(torch.randn(m, 4, generator=g), dim=-1),
        0.005 + 0.01 * torch.rand(m, 3, generator=g),
        torch.rand(m, 3, generator=g),
        0.4 + 0.55 * torch.rand(m, generator=g),
    )
    # One object Gaussian below the table top: hidden by the table in both ways of rendering.
    objs = tuple(torch.cat([o, o[:1]]) for o in objs)
    objs[0][-1] = torch.tensor([0.0, 0.0, -0.05])
    eye = torch.tensor([[-0.7, 0.0, 0.6], [0.0, -0.7, 0.6]], dtype=torch.float64)
    from realissim.geometry import look_at

    X = torch.stack([torch.as_tensor(look_at(e.numpy(), [0.0, 0.0, 0.0], [0.0, 0.0, 1.0])) for e in eye])
    K = torch.tensor([[60.0, 0, 40], [0, 60.0, 30], [0, 0, 1]], dtype=torch.float64).expand(2, 3, 3)
    cast = lambda ts: tuple(t.to(dtype) for t in ts)  # noqa: E731
    return cast(table), cast(objs), K.to(dtype), X.to(dtype)


@pytest.mark.parametrize("backend", BACKENDS)
def test_static_layer_equals_rendering_everything(backend: str) -> None:
    w, h = 80, 60
    table, objs, Ks, X_WCs = _table_scene(torch.float64)
    static = render_static(*table, Ks, X_WCs, w, h, backend=backend)
    bg = torch.tensor([0.2, 0.3, 0.9], dtype=torch.float64)
    out, grads = _render_with_grads(backend, objs, Ks, X_WCs, w, h, torch.float64, background=bg, static=static)
    everything = [torch.cat([a, b]) for a, b in zip(objs, table)]
    full, full_grads = _render_with_grads(backend, everything, Ks, X_WCs, w, h, torch.float64, background=bg)
    assert static.alpha.max() > 0.99  # the table really is opaque somewhere
    # Early termination (T < 1e-4) can stop at a different Gaussian in the two renders: a few pixels
    # may differ by up to T_MIN / (1 - ALPHA_MAX) = 1e-2; the rest agree to rounding.
    for got, want in zip(out[:2], full[:2]):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-2)
        assert (got - want).abs().gt(1e-4).float().mean() < 1e-3
    torch.testing.assert_close(out[2], full[2], rtol=0, atol=2e-3)
    m = objs[0].shape[0]
    for got, want in zip(grads, full_grads):
        torch.testing.assert_close(got, want[:m], rtol=1e-3, atol=1e-3 * want.abs().max().item())


def test_cpu_static_layer_matches_reference() -> None:
    w, h = 80, 60
    table, objs, Ks, X_WCs = _table_scene(torch.float64)
    static = render_static(*table, Ks, X_WCs, w, h, backend="reference")
    ref, ref_grads = _render_with_grads("reference", objs, Ks, X_WCs, w, h, torch.float64, static=static)
    out, grads = _render_with_grads("cpu", objs, Ks, X_WCs, w, h, torch.float64, static=static)
    for got, want in zip([*out, *grads], [*ref, *ref_grads]):
        torch.testing.assert_close(got, want, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize(
    ("field", "mutate"),
    [
        ("means", lambda a: a[0].__setitem__((0, 0), float("nan"))),
        ("opacities", lambda a: a.__setitem__(4, a[4][:-1])),
        ("scales", lambda a: a[2].__setitem__((1, 1), -0.01)),
        ("Ks", lambda a: a.__setitem__(5, a[5][0])),
        ("X_WCs", lambda a: a[6].__setitem__((0, 0, 3), float("inf"))),
        ("opacities", lambda a: a[4].__setitem__(0, 1.5)),
        ("Ks", lambda a: a[5].__setitem__((0, 0, 0), -100.0)),
    ],
)
def test_bad_input_names_the_argument(field: str, mutate) -> None:
    Ks, X_WCs = cameras(1, 16, 12)
    args = [*random_gaussians(5, seed=0), Ks, X_WCs]
    mutate(args)
    with pytest.raises(ValueError, match=field):
        rasterize(*args, 16, 12)


def test_unknown_backend_and_bad_background_are_rejected() -> None:
    Ks, X_WCs = cameras(1, 16, 12)
    scene = random_gaussians(5, seed=0)
    with pytest.raises(ValueError, match="backend"):
        rasterize(*scene, Ks, X_WCs, 16, 12, backend="opengl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="background"):
        rasterize(*scene, Ks, X_WCs, 16, 12, background=torch.zeros(2, 3))
    with pytest.raises(ValueError, match="camera gradients"):
        rasterize(*scene, Ks, X_WCs.clone().requires_grad_(), 16, 12, backend="cpu")
    with pytest.raises(ValueError, match="float32 and float64"):
        rasterize(*(t.half() for t in scene), Ks.half(), X_WCs.half(), 16, 12, backend="cpu")
