"""A printed calibration target: black dots on a white board, lying flat on the table at a told pose.

The same description serves the twin (which calibrates its cameras from images of the board) and the surrogate
real world (which draws it where it truly lies: the told pose plus the gap's placement error). The board is
flat; its printed face is `thickness` above the table top (z = 0), and the dots form a `rows` × `cols` grid
(rows along the board's x axis) centred on the board's origin.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from realissim.spec.errors import SpecError

Vec2 = tuple[float, float]


@dataclass(frozen=True)
class DotBoard:
    """A dot-grid calibration board on the table (world frame, m and rad)."""

    center: Vec2 = (0.0, 0.0)
    """Told position of the board's centre on the table, world x, y, m."""
    yaw: float = 0.0
    """Told rotation of the board about world z, rad."""
    rows: int = 6
    """Dots along the board's x axis."""
    cols: int = 8
    """Dots along the board's y axis."""
    spacing: float = 0.08
    """Distance between neighbouring dot centres, m."""
    radius: float = 0.025
    """Dot radius, m."""
    margin: float = 0.04
    """White border from the outer dot centres to the board's edge, m."""
    thickness: float = 0.001
    """Height of the printed face above the table top, m."""

    def __post_init__(self) -> None:
        for name in ("rows", "cols"):
            if not (isinstance(getattr(self, name), int) and getattr(self, name) >= 2):
                raise SpecError(name, f"must be an integer ≥ 2, got {getattr(self, name)!r}")
        for name in ("spacing", "radius", "margin", "thickness"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise SpecError(name, f"must be a positive number of metres, got {value!r}")
        if not 2 * self.radius < self.spacing:
            raise SpecError("radius", f"dots of radius {self.radius} m overlap at spacing {self.spacing} m")
        if not self.radius < self.margin:
            raise SpecError("margin", f"must exceed the dot radius {self.radius} m, got {self.margin}")
        if not all(math.isfinite(v) for v in (*self.center, self.yaw)):
            raise SpecError("center", "the board's pose must be finite")

    @property
    def half_size(self) -> Vec2:
        """Half the board's extent along its x and y axes, m."""
        return (
            (self.rows - 1) * self.spacing / 2 + self.margin,
            (self.cols - 1) * self.spacing / 2 + self.margin,
        )

    def dots_local(self) -> np.ndarray:
        """Dot centres (rows·cols, 2) in the board's frame, m (row-major)."""
        x = (np.arange(self.rows) - (self.rows - 1) / 2) * self.spacing
        y = (np.arange(self.cols) - (self.cols - 1) / 2) * self.spacing
        gx, gy = np.meshgrid(x, y, indexing="ij")
        return np.column_stack([gx.ravel(), gy.ravel()])

    def placed(self, offset: tuple[float, float, float]) -> DotBoard:
        """The same board moved by `offset` (dx, dy m in the world, dyaw rad): where a told board truly lies."""
        return dataclasses.replace(
            self, center=(self.center[0] + offset[0], self.center[1] + offset[1]), yaw=self.yaw + offset[2]
        )

    def dots_world(self) -> np.ndarray:
        """Dot centres (rows·cols, 3) on the printed face, world frame, m."""
        c, s = math.cos(self.yaw), math.sin(self.yaw)
        local = self.dots_local()
        x = self.center[0] + c * local[:, 0] - s * local[:, 1]
        y = self.center[1] + s * local[:, 0] + c * local[:, 1]
        return np.column_stack([x, y, np.full(len(local), self.thickness)])


__all__ = ["DotBoard"]
