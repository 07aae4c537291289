"""Shortest tip routes in the table plane around the T (a visibility graph over its inflated corners).

The T's footprint is two boxes (bar and stem). A route from `a` to `b` is a polyline whose straight legs keep
the rod's centre at least `clearance` from the footprint — or, for a leg that starts or ends closer than that
(an approach point just behind a contact, a tip that has just pushed), no closer than its ends are. The legs'
corners are the corners of the two boxes inflated by `corner_margin` (> `clearance`, so a leg between corners
is clear by construction), those not inside the other box's inflation. Dijkstra over at most 10 nodes; every
leg is checked by sampling the footprint distance every 2 mm.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike

from realissim.assets.pusht import TBlock
from realissim.geometry import planar_rotation

Footprint = Callable[[np.ndarray], np.ndarray]
"""Planar distance (...) m from body-frame points (..., 2) to the obstacle's footprint (0 inside)."""


def box_corners(block: TBlock, margin: float) -> np.ndarray:
    """Corners (8, 2) in the T's body frame of its bar and stem boxes, each inflated by `margin` m."""
    out = []
    for box in block.boxes():
        c, h = np.asarray(box.center[:2]), np.asarray(box.half[:2]) + margin
        out += [c + h * np.array(s) for s in ((1, 1), (-1, 1), (-1, -1), (1, -1))]
    return np.asarray(out)


def route_in_plane(
    a: ArrayLike,
    b: ArrayLike,
    xy: ArrayLike,
    yaw: float,
    block: TBlock,
    footprint: Footprint,
    clearance: float,
    corner_margin: float,
    allowed: Callable[[np.ndarray], np.ndarray] | None = None,
    step: float = 0.002,
) -> np.ndarray | None:
    """The shortest route (M ≥ 2, 2), world frame, m, from `a` (2,) to `b` (2,) around the T at planar position
    `xy` (2,) m and yaw `yaw` rad, or None when there is none.

    `footprint`: distance from body-frame points to the T (see `Footprint`). `clearance`: least distance of the
    rod's centre from the footprint along a leg (a leg may come as close as its ends are, when they are closer).
    `corner_margin`: inflation of the corners used as via points, m (> clearance). `allowed`: optional predicate
    (N,) bool on world points (N, 2) (e.g. the arm's reach); legs through points it rejects are not used.
    """
    if not corner_margin > clearance >= 0:
        raise ValueError(f"need corner_margin > clearance >= 0, got {corner_margin}, {clearance}")
    R = planar_rotation(float(yaw))
    origin = np.asarray(xy, dtype=np.float64)[:2]
    a_B = (np.asarray(a, dtype=np.float64)[:2] - origin) @ R
    b_B = (np.asarray(b, dtype=np.float64)[:2] - origin) @ R
    corners = box_corners(block, corner_margin)
    corners = corners[footprint(corners) >= clearance + 1e-9]
    nodes = np.concatenate([a_B[None], b_B[None], corners])
    own = footprint(nodes)

    def clear(i: int, j: int) -> bool:
        p, q = nodes[i], nodes[j]
        n = max(2, math.ceil(float(np.linalg.norm(q - p)) / step) + 1)
        pts = p + (q - p) * np.linspace(0.0, 1.0, n)[:, None]
        need = min(clearance, own[i], own[j]) - 1e-9
        if footprint(pts).min() < need:
            return False
        return allowed is None or bool(np.all(allowed(pts @ R.T + origin)))

    # Dijkstra from node 0 (a) to node 1 (b) on the visibility graph (legs checked lazily).
    n = len(nodes)
    dist = np.full(n, np.inf)
    prev = np.full(n, -1)
    dist[0] = 0.0
    heap = [(0.0, 0)]
    done = np.zeros(n, dtype=bool)
    while heap:
        d, i = heapq.heappop(heap)
        if done[i]:
            continue
        done[i] = True
        if i == 1:
            break
        for j in range(n):
            if done[j]:
                continue
            nd = d + float(np.linalg.norm(nodes[j] - nodes[i]))
            if nd < dist[j] and clear(i, j):
                dist[j], prev[j] = nd, i
                heapq.heappush(heap, (nd, j))
    if not np.isfinite(dist[1]):
        return None
    path, k = [], 1
    while k != -1:
        path.append(nodes[k])
        k = int(prev[k])
    return np.asarray(path[::-1]) @ R.T + origin
