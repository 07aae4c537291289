"""The twin-parameter file: dynamics identified from the world (`realissim sysid`), with their 95 % intervals.

It holds, per object, the sliding-friction scale, mass scale and centre-of-mass offset relative to the scene's
description (what `ObjectDraw` applies to a compiled model), each with the half-width of its interval (null: not
identified, or the data did not bound it — the description is then kept), plus a free-form "fit" record (data used,
residuals). `IdentifiedDynamics.draws` sets a twin to the identified values; `randomization` turns the intervals
into the ranges a collection draws from (`collect --randomize-from FILE`).

    {"format": "realissim.twin-parameters", "version": 1,
     "objects": {"tblock": {"friction_scale": 0.86, "friction_ci95": 0.03,
                            "mass_scale": 1.0, "mass_ci95": null,
                            "com_offset": [0.004, -0.003, 0.0], "com_ci95": [0.001, 0.001]}},
     "fit": {...}}
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from realissim.twin.randomize import DynamicsRandomization, ObjectDraw

FORMAT = "realissim.twin-parameters"
VERSION = 1


@dataclass(frozen=True)
class IdentifiedObject:
    """One object's identified dynamics (scales relative to the scene; offsets body frame, m); a `None` half-width:
    not identified (the value is then the description's: 1 or 0)."""

    name: str
    friction_scale: float = 1.0
    friction_ci95: float | None = None
    mass_scale: float = 1.0
    mass_ci95: float | None = None
    com_offset: tuple[float, float, float] = (0.0, 0.0, 0.0)
    com_ci95: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        for key in ("friction_scale", "mass_scale"):
            v = getattr(self, key)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise ValueError(f"objects.{self.name}.{key}: must be a finite number > 0, got {v!r}")
        if len(self.com_offset) != 3 or not all(math.isfinite(v) for v in self.com_offset):
            raise ValueError(f"objects.{self.name}.com_offset: must be 3 finite numbers (m), got {self.com_offset!r}")
        for key in ("friction_ci95", "mass_ci95"):
            v = getattr(self, key)
            if v is not None and not v >= 0:
                raise ValueError(f"objects.{self.name}.{key}: must be ≥ 0 or null, got {v!r}")
        if self.com_ci95 is not None and (len(self.com_ci95) != 2 or not all(v >= 0 for v in self.com_ci95)):
            raise ValueError(f"objects.{self.name}.com_ci95: must be 2 numbers ≥ 0 (m) or null, got {self.com_ci95!r}")

    def as_draw(self) -> ObjectDraw:
        return ObjectDraw(self.name, self.friction_scale, self.mass_scale, self.com_offset)


@dataclass(frozen=True)
class IdentifiedDynamics:
    """The contents of a twin-parameter file."""

    objects: tuple[IdentifiedObject, ...]
    fit: dict[str, Any] = field(default_factory=dict)

    def draws(self) -> tuple[ObjectDraw, ...]:
        """The identified values, to apply to a twin (`ObjectDynamics.apply`)."""
        return tuple(o.as_draw() for o in self.objects)

    def randomization(self, widen: float = 1.0, floor: float = 0.02) -> DynamicsRandomization:
        """Ranges for a collection drawn from the intervals: each scale's value ± `widen` × its half-width (at least
        ± `floor` relative), the centre-of-mass disc of radius |offset| + `widen` × its larger half-width. Several
        objects share one range per quantity (the widest). A quantity not identified keeps the description
        (range 1–1)."""
        if not self.objects:
            raise ValueError("no identified objects to randomise")

        def span(value: float, half: float | None) -> tuple[float, float]:
            if half is None or not math.isfinite(half):
                return value, value
            h = max(widen * half, floor * value)
            return max(value - h, 1e-3), value + h

        frictions = [span(o.friction_scale, o.friction_ci95) for o in self.objects]
        masses = [span(o.mass_scale, o.mass_ci95) for o in self.objects]
        radius = max(
            math.hypot(*o.com_offset[:2]) + (widen * max(o.com_ci95) if o.com_ci95 is not None else 0.0)
            for o in self.objects
        )
        return DynamicsRandomization(
            friction=(min(a for a, _ in frictions), max(b for _, b in frictions)),
            mass=(min(a for a, _ in masses), max(b for _, b in masses)),
            com_offset=min(radius, 0.049),
            objects=tuple(o.name for o in self.objects),
        )

    def to_dict(self) -> dict[str, Any]:
        objects = {}
        for o in self.objects:
            objects[o.name] = {
                "friction_scale": o.friction_scale, "friction_ci95": o.friction_ci95,
                "mass_scale": o.mass_scale, "mass_ci95": o.mass_ci95,
                "com_offset": list(o.com_offset), "com_ci95": None if o.com_ci95 is None else list(o.com_ci95),
            }  # fmt: skip
        return {"format": FORMAT, "version": VERSION, "objects": objects, "fit": self.fit}

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(_finite(self.to_dict()), indent=2) + "\n")

    @staticmethod
    def from_dict(data: Any, where: str = "twin parameters") -> IdentifiedDynamics:
        """Parse a file's contents; ValueError naming `where` and the field otherwise."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f'{where}: not a twin-parameter file (needs "format": {FORMAT!r})')
        if data.get("version") != VERSION:
            raise ValueError(f"{where}: version {data.get('version')!r}, this code reads {VERSION}")
        objects = data.get("objects")
        if not isinstance(objects, dict) or not objects:
            raise ValueError(f'{where}: "objects" must map object names to their dynamics')
        out = []
        known = {"friction_scale", "friction_ci95", "mass_scale", "mass_ci95", "com_offset", "com_ci95"}
        for name, entry in objects.items():
            if not isinstance(entry, dict):
                raise ValueError(f"{where}: objects.{name} must be an object")
            unknown = set(entry) - known
            if unknown:
                raise ValueError(f"{where}: objects.{name}: unknown field {sorted(unknown)[0]!r}")
            try:
                com = entry.get("com_offset", (0.0, 0.0, 0.0))
                ci = entry.get("com_ci95")
                out.append(IdentifiedObject(
                    name,
                    float(entry.get("friction_scale", 1.0)), _opt(entry.get("friction_ci95")),
                    float(entry.get("mass_scale", 1.0)), _opt(entry.get("mass_ci95")),
                    (float(com[0]), float(com[1]), float(com[2])),
                    None if ci is None else (float(ci[0]), float(ci[1])),
                ))  # fmt: skip
            except (TypeError, IndexError) as err:
                raise ValueError(f"{where}: objects.{name}: {err}") from None
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
        fit = data.get("fit", {})
        return IdentifiedDynamics(tuple(out), fit if isinstance(fit, dict) else {})

    @staticmethod
    def load(path: str | Path) -> IdentifiedDynamics:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except OSError as err:
            raise ValueError(f"{p}: cannot read: {err.strerror}") from None
        except json.JSONDecodeError as err:
            raise ValueError(f"{p}: not JSON: {err}") from None
        return IdentifiedDynamics.from_dict(data, str(p))


def _opt(v: Any) -> float | None:
    return None if v is None else float(v)


def _finite(value: Any) -> Any:
    """JSON-safe: non-finite floats (an unbounded interval) as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value
