"""The reality gap: how the surrogate real world differs from the scene description the twin is given.

A `GapProfile` is read from a JSON file (`load_gap`) with the project's strict JSON reader
(`realissim.spec.io`, as scenes are): unknown keys, wrong types, NaN/inf and out-of-range values are
errors (`SpecError`) naming the field, e.g. `arm.latency: must be ≥ 0, got -0.1`. Every key but a
disturbance's "kind" is optional; a missing key takes the default below, so `{}` is the default profile
(`default_gap.json` beside this module is that profile written out). An object entry naming no object
of the scene is logged and ignored, so the default profile fits any scene.

Format (SI units: m, kg, s, rad; px for image coordinates; intensities on the 0–255 scale)::

    {
      "objects": [                        # matched by object name; "*" = every object not named
        {"name": "tblock", "shape": "exact", "boxes": null,   # collides on the scene object's described boxes
         "friction_scale": 0.85, "mass_scale": 1.1, "com_offset": [0.004, -0.003, 0.0]},
        {"name": "*", "shape": "spheres", "friction_scale": 1.15, "mass_scale": 1.08,
         "com_offset": [0.002, 0.002, 0.0]}
      ],
      "arm": {"control_rate": 1000.0, "kp": [7 values], "kv": [7 values], "latency": 0.004,
              "joint_friction": [7 values], "joint_offset": [7 values], "gravity_compensation": 1.0,
              "feedforward_filter": 0.01},
      "cameras": [{"name": "*", "noise_std": 2.0, "exposure": 1.06, "white_balance": [1.04, 1.0, 0.94],
                   "rotation_error": [0.005, -0.006, 0.003], "translation_error": [0.002, -0.002, 0.0015],
                   "focal_scale": 1.008, "principal_offset": [1.5, -1.0]}],
      "lighting": {"key_direction": [...], "key_color": [...], "fill_direction": [...], "fill_color": [...],
                   "ambient": [...], "headlight": 0.12, "specular": 0.25, "shadow_size": 0},
      "disturbances": [
        {"kind": "move_object", "at": 2.0, "object": "tblock", "displacement": [0.03, 0.0, 0.0],
         "rotation": 0.3},
        {"kind": "occlude", "at": 3.0, "duration": 1.0, "camera": "front", "center": [0.4, 0.6], "size": 0.35},
        {"kind": "drop_frame", "at": 4.0}, {"kind": "lighting", "at": 5.0, "duration": 2.0, "intensity": 0.5}
      ],
      "board_error": [0.0008, -0.0006, 0.0026],   # the calibration board's placement error: dx, dy m, dyaw rad
      "version": 1
    }

An object's real shape is "exact" (its exact shape as the scene describes it, `ObjectSpec.boxes`; an object
described without boxes is its sphere set) or "spheres" (the twin's sphere set even where boxes are described);
`boxes` ([{"center": [x, y, z], "half": [hx, hy, hz]}, ...], body frame, m) gives a real shape that differs
from the description. A key an older format had is an error that says what replaced it (`ObjectGap.RETIRED_KEYS`).

Calibration errors are what reality adds to what the twin is told: the true camera pose is
X_WC_told · [R(rotation_error) | translation_error] (both in the told camera's frame), the true focal
lengths are the told ones × focal_scale, the true principal point is the told one + principal_offset.
The arm's encoders read q_true + joint_offset; its controller drives the encoder reading to the command.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from realissim.spec.codec import from_dict, to_dict
from realissim.spec.errors import SpecError
from realissim.spec.io import from_json, load_json, save_json, to_json
from realissim.spec.scene import BoxSpec

Vec2 = tuple[float, float]
Vec3 = tuple[float, float, float]
WILDCARD = "*"
"""Name of the entry that applies to every object (camera) no other entry names."""
DEFAULT_GAP_PATH = Path(__file__).with_name("default_gap.json")
"""The default profile as a JSON file (equal to `GapProfile()`)."""

DisturbanceKind = Literal["move_object", "drop_frame", "delay_frame", "occlude", "lighting", "freeze_camera"]


def _require(ok: bool, name: str, reason: str) -> None:
    if not ok:
        raise SpecError(name, reason)


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        values = value if isinstance(value, tuple) else (value,)
        _require(all(v > 0 for v in values), name, f"must be > 0, got {value}")


def _non_negative(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        values = value if isinstance(value, tuple) else (value,)
        _require(all(v >= 0 for v in values), name, f"must be ≥ 0, got {value}")


def _check_name(name: str) -> None:
    _require(bool(name.strip()), "name", "must be a non-empty name (or '*')")


ObjectShape = Literal["exact", "spheres"]
"""What a real object collides on (`ObjectGap.shape`)."""


@dataclass(frozen=True)
class ObjectGap:
    """The real object behind one scene object: its shape and its true physical parameters.

    The real centre of mass is the described one (`ObjectSpec.inertia`, else uniform density over the spheres)
    moved by `com_offset`, and by as much as a shape gap (`boxes`) moves the centroid of the described shape. The
    real inertia about it is that of uniform density over the real boxes at the true mass, or for the sphere set
    the described inertia scaled by the mass ratio.
    """

    RETIRED_KEYS: ClassVar[Mapping[str, str]] = {
        "t_block": 'replaced by "shape" and "boxes": "shape": "exact" collides on the scene object\'s described '
        'boxes (as a t_block with the T\'s dimensions did), "shape": "spheres" on its sphere set (as "t_block": '
        'null did); "boxes" gives a real shape other than the described one'
    }
    """Keys of older profiles that are no longer read, and what replaced them (see `realissim.spec.codec`)."""

    name: str = WILDCARD
    """Scene object this entry applies to; "*" applies to every object without its own entry."""
    shape: ObjectShape = "exact"
    """What the real object collides on. "exact": its exact shape: `boxes` below if given, else the scene object's
    described boxes (`ObjectSpec.boxes`); an object described without boxes has its sphere set as its exact shape
    and collides on it. "spheres": the scene object's sphere set (the twin's own collision geometry), even where
    boxes are described."""
    boxes: tuple[BoxSpec, ...] | None = None
    """A shape gap: the real object's exact shape as axis-aligned boxes in its body frame (m), in place of the
    described one; null: as described. Only with shape "exact"."""
    friction_scale: float = 1.0
    """True sliding friction = scene friction × this."""
    mass_scale: float = 1.0
    """True mass = scene mass × this (inertia scales with it)."""
    com_offset: Vec3 = (0.0, 0.0, 0.0)
    """True centre of mass − described centre of mass, body frame, m (beyond what a shape gap moves it)."""

    def __post_init__(self) -> None:
        _check_name(self.name)
        _positive(self, "friction_scale", "mass_scale")
        _require(self.shape in ("exact", "spheres"), "shape", f"must be 'exact' or 'spheres', got {self.shape!r}")
        if self.boxes is not None:
            _require(len(self.boxes) > 0, "boxes", "must hold at least one box (or be null)")
            _require(self.shape == "exact", "boxes", f"a real shape needs shape 'exact', not {self.shape!r}")


@dataclass(frozen=True)
class ArmGap:
    """The real arm's own joint controller and the small errors of its hardware (joint order of the robot)."""

    control_rate: float = 1000.0
    """Joint controller rate, Hz (the physics runs at this rate too)."""
    kp: tuple[float, ...] = (3600.0, 3600.0, 2800.0, 2800.0, 1600.0, 1600.0, 1600.0)
    """Stiffness per joint, N·m/rad (finite; 0.8 × the twin's servo)."""
    kv: tuple[float, ...] = (160.0, 160.0, 110.0, 110.0, 36.0, 36.0, 27.0)
    """Damping per joint on the velocity error, N·m·s/rad (0.9 × the twin's)."""
    latency: float = 0.004
    """Time from a command being sent to the controller acting on it, s (rounded to whole control ticks)."""
    joint_friction: tuple[float, ...] = (0.5, 0.5, 0.4, 0.4, 0.25, 0.25, 0.2)
    """Coulomb friction per joint, N·m (MuJoCo frictionloss)."""
    joint_offset: tuple[float, ...] = (0.0005, -0.0008, 0.0005, 0.001, -0.0005, 0.0008, -0.0004)
    """Encoder calibration error per joint: reading − true angle, rad."""
    gravity_compensation: float = 1.0
    """Fraction of the links' weight the controller cancels (1: its model is exact)."""
    feedforward_filter: float = 0.01
    """Time constant of the low-pass on the command's rate of change used as the velocity target, s
    (0: no velocity feed-forward, damping acts on q̇ alone)."""

    def __post_init__(self) -> None:
        _positive(self, "control_rate", "kp", "kv")
        _non_negative(self, "latency", "joint_friction", "feedforward_filter", "gravity_compensation")
        for name in ("kv", "joint_friction", "joint_offset"):
            n = len(getattr(self, name))
            _require(n == len(self.kp), name, f"must have one value per joint ({len(self.kp)} in kp), got {n}")
        _require(self.gravity_compensation <= 1.5, "gravity_compensation", "must be ≤ 1.5")

    @property
    def control_dt(self) -> float:
        """Control period, s."""
        return 1.0 / self.control_rate


@dataclass(frozen=True)
class CameraGap:
    """One real camera's image formation and calibration error relative to what the twin is told."""

    name: str = WILDCARD
    """Scene camera this entry applies to; "*" applies to every camera without its own entry."""
    noise_std: float = 2.0
    """Standard deviation of per-pixel, per-channel Gaussian noise, intensity units (0–255)."""
    exposure: float = 1.06
    """Gain on all channels (1: as rendered)."""
    white_balance: Vec3 = (1.04, 1.0, 0.94)
    """Gain per channel R, G, B (a warm cast)."""
    rotation_error: Vec3 = (0.005, -0.006, 0.003)
    """True orientation relative to the told one, rotation vector in the told camera's frame, rad (~0.5°)."""
    translation_error: Vec3 = (0.002, -0.002, 0.0015)
    """True position − told position, in the told camera's frame, m (~3 mm)."""
    focal_scale: float = 1.008
    """True focal lengths = told × this."""
    principal_offset: Vec2 = (1.5, -1.0)
    """True principal point − told, px at the scene camera's resolution (scaled with the image)."""
    pixel_samples: int = 1
    """Each pixel is the mean of `pixel_samples` × `pixel_samples` point samples over its area, as a sensor
    integrates the light falling on it; 1 samples each pixel at its centre only (aliased edges)."""

    def __post_init__(self) -> None:
        _check_name(self.name)
        _non_negative(self, "noise_std")
        _positive(self, "exposure", "white_balance", "focal_scale")
        _require(
            isinstance(self.pixel_samples, int) and self.pixel_samples >= 1,
            "pixel_samples",
            f"must be an integer ≥ 1, got {self.pixel_samples!r}",
        )


@dataclass(frozen=True)
class LightingGap:
    """The real room's lights (the twin's renderer knows nothing of them)."""

    key_direction: Vec3 = (0.45, 0.3, -1.0)
    """Direction the main (shadow-casting) directional light shines in, world frame (normalised on use)."""
    key_color: Vec3 = (0.72, 0.68, 0.6)
    """Diffuse RGB of the key light, warm."""
    fill_direction: Vec3 = (-0.6, -0.5, -1.0)
    """Direction of the fill light, world frame."""
    fill_color: Vec3 = (0.22, 0.24, 0.3)
    """Diffuse RGB of the fill light, cool."""
    ambient: Vec3 = (0.16, 0.16, 0.17)
    """Ambient RGB added by the key light."""
    headlight: float = 0.12
    """Diffuse intensity of a light at each camera (grey)."""
    specular: float = 0.25
    """Specular intensity of the directional lights."""
    shadow_size: int = 0
    """Shadow map size of the key light, px (0: no shadows). Shadows cost ~6 ms (256) to ~13 ms (1024) per
    camera image on a llvmpipe CPU, against ~2 ms for a 160×90 image without, so they are off by default."""

    def __post_init__(self) -> None:
        _non_negative(self, "key_color", "fill_color", "ambient", "headlight", "specular", "shadow_size")
        for name in ("key_direction", "fill_direction"):
            _require(getattr(self, name)[2] < 0, name, "must point downwards (negative z)")


@dataclass(frozen=True)
class Disturbance:
    """Something that happens to the real world at time `at`: scheduled in a profile or injected live.

    Kinds: "move_object" (an unseen hand moves `object` by `displacement` and `rotation` about world z
    through its origin, and stops it); "drop_frame" (`camera`, or every camera if null, delivers no new
    frame); "delay_frame" (it delivers the previous frame's image); "freeze_camera" (it delivers the
    same image again and again, with fresh timestamps); "occlude" (a hand-like blob covers part of
    `camera`'s view); "lighting" (all lights are scaled by `intensity`; the lights are shared, so
    `camera` is ignored).
    """

    kind: DisturbanceKind
    """What happens."""
    at: float = 0.0
    """Time it starts, s (world time; it takes effect at the first frame at or after it). World time restarts
    at every reset, so a profile's scheduled disturbances recur in every episode; live ones are cleared."""
    duration: float = 0.0
    """How long it lasts, s (at least one frame; ignored for move_object)."""
    camera: str | None = None
    """Camera it affects (null: every camera); required for occlude."""
    object: str | None = None
    """Object it moves; required for move_object."""
    displacement: Vec3 = (0.0, 0.0, 0.0)
    """move_object: world-frame translation, m."""
    rotation: float = 0.0
    """move_object: rotation about world z through the object's origin, rad."""
    center: Vec2 = (0.5, 0.5)
    """occlude: centre of the hand's palm, fraction of image width and height."""
    size: float = 0.35
    """occlude: length of the palm and fingers, fraction of image height."""
    intensity: float = 0.5
    """lighting: factor on every light."""

    def __post_init__(self) -> None:
        _non_negative(self, "at", "duration")
        _positive(self, "size", "intensity")
        if self.kind == "move_object":
            _require(self.object is not None, "object", "move_object needs the object's name")
        if self.kind == "occlude":
            _require(self.camera is not None, "camera", "occlude needs the camera's name")
        moved = any(self.displacement) or self.rotation != 0.0
        _require(self.kind == "move_object" or not moved, "displacement", f"only for move_object, not {self.kind}")


@dataclass(frozen=True)
class GapProfile:
    """The whole reality gap of a surrogate world; the defaults are the shipped default profile."""

    objects: tuple[ObjectGap, ...] = (
        ObjectGap(name="tblock", friction_scale=0.85, mass_scale=1.1, com_offset=(0.004, -0.003, 0.0)),
        ObjectGap(name=WILDCARD, shape="spheres", friction_scale=1.15, mass_scale=1.08, com_offset=(0.002, 0.002, 0.0)),
    )
    """Per object, by name; objects matching no entry are as described."""
    arm: ArmGap = field(default_factory=ArmGap)
    cameras: tuple[CameraGap, ...] = (CameraGap(),)
    """Per camera, by name; cameras matching no entry are perfect."""
    lighting: LightingGap = field(default_factory=LightingGap)
    disturbances: tuple[Disturbance, ...] = ()
    """Scheduled disturbances, in any order."""
    board_error: Vec3 = (0.0008, -0.0006, 0.0026)
    """Where the calibration board truly lies relative to where the twin is told it lies (`Surrogate.show_board`):
    world x, y offset m and rotation about world z rad (a board laid against a fixture: ~1 mm, ~0.15°)."""
    version: int = 1

    def __post_init__(self) -> None:
        _require(self.version == 1, "version", f"unsupported gap format version {self.version} (expected 1)")
        for key, entries in (("objects", self.objects), ("cameras", self.cameras)):
            names = [e.name for e in entries]
            for i, name in enumerate(names):
                _require(name not in names[:i], f"{key}[{i}].name", f"duplicate name {name!r}")

    def object_gap(self, name: str) -> ObjectGap:
        """The entry for object `name`: its own, else the wildcard, else no gap."""
        return _lookup(self.objects, name, ObjectGap())

    def camera_gap(self, name: str) -> CameraGap:
        """The entry for camera `name`: its own, else the wildcard, else a perfect camera."""
        perfect = CameraGap(
            noise_std=0.0,
            exposure=1.0,
            white_balance=(1.0, 1.0, 1.0),
            rotation_error=(0.0, 0.0, 0.0),
            translation_error=(0.0, 0.0, 0.0),
            focal_scale=1.0,
            principal_offset=(0.0, 0.0),
        )
        return _lookup(self.cameras, name, perfect)


def _lookup(entries: tuple[Any, ...], name: str, fallback: Any) -> Any:
    by_name = {e.name: e for e in entries}
    return by_name.get(name, by_name.get(WILDCARD, fallback))


def gap_from_dict(data: Any) -> GapProfile:
    """Validate a JSON-like dict and build the profile; raises `SpecError` naming the bad field."""
    return from_dict(GapProfile, data)


def gap_to_dict(gap: GapProfile) -> dict[str, Any]:
    """The profile as plain JSON types; `gap_from_dict(gap_to_dict(g)) == g`."""
    return to_dict(gap)


def gap_from_json(text: str | bytes) -> GapProfile:
    """Parse JSON text into a validated profile; any problem is a `SpecError` naming the field."""
    return from_json(GapProfile, text)


def gap_to_json(gap: GapProfile) -> str:
    """Indented JSON text that reads back to an equal profile (floats round-trip exactly)."""
    return to_json(gap)


def load_gap(path: str | Path) -> GapProfile:
    """Read and validate a gap profile JSON file; errors name the file and the field."""
    return load_json(GapProfile, path, what="gap profile")


def save_gap(gap: GapProfile, path: str | Path) -> None:
    """Write the profile as JSON, atomically (a temporary file renamed over the target)."""
    save_json(gap, path)
