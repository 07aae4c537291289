"""The surrogate real world's MuJoCo model, its cameras and its arm controller (docs/design.md §4).

The model starts from the twin's (`realissim.assets.mjcf.scene_to_mjcf`, so kinematics, inertias and
collision classes agree) and then takes on the reality gap: objects get their true mass, centre of
mass, friction and shape (by default the exact shape the scene describes, `ObjectSpec.boxes`, where the
twin collides on spheres); the arm's position servos are replaced by torque motors driven by
`ArmController` (a 1 kHz PD loop with latency, finite gains and joint friction); cameras are placed
where they truly are; and the scene gets textured, lit materials so MuJoCo's OpenGL renderer draws a
table scene rather than flat colours. The cameras' own image formation (exposure, white balance,
noise) and the occluding hand are here too.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import math
import xml.etree.ElementTree as ET

import numpy as np
from numpy.typing import ArrayLike

from realissim.assets import panda
from realissim.assets.mass import box_union_inertia, sphere_union_inertia
from realissim.assets.mjcf import GROUND_GEOM, KEYFRAME_HOME, MjcfOptions, scene_to_mjcf
from realissim.geometry import axis_angle_quat, mat_to_quat, quat_to_mat
from realissim.real.surrogate.gap import WILDCARD, ArmGap, CameraGap, GapProfile, LightingGap, ObjectGap
from realissim.spec.board import DotBoard
from realissim.spec.errors import SpecError
from realissim.spec.scene import BoxSpec, CameraSpec, InertiaSpec, ObjectSpec, SceneSpec

log = logging.getLogger(__name__)

MOTOR_PREFIX = "real_motor_"
"""Torque actuators are named MOTOR_PREFIX + joint name."""
KEY_LIGHT, FILL_LIGHT = "key", "fill"
SENSOR_PITCH = 1e-5
"""Pixel pitch used to express intrinsics as a MuJoCo sensor size, m/px (any value works)."""
SKIN = np.array([222.0, 172.0, 148.0], dtype=np.float32)
"""RGB of the occluding hand, 0–255."""
SCENE_EXTENT = 2.0
"""Model extent, m: sets the near/far planes' scale and the directional shadows' coverage."""
BOARD_GROUP = 5
"""Geom group of the calibration board (drawn only while `SurrogateWorld.show_board` says so)."""
BOARD_BODY = "calibration_board"


def _sub(parent: ET.Element, tag: str, **attrs: object) -> ET.Element:
    def text(v: object) -> str:
        if isinstance(v, str):
            return v
        return " ".join(repr(float(x)) for x in np.atleast_1d(np.asarray(v, dtype=np.float64)))

    return ET.SubElement(parent, tag, {k: text(v) for k, v in attrs.items()})


def perturb_camera(told: CameraSpec, error: CameraGap, pixel_scale: tuple[float, float] = (1.0, 1.0)) -> CameraSpec:
    """The true camera behind `told`: pose X_WC_told · [R(rotation_error) | translation_error], focal
    lengths × focal_scale, principal point + principal_offset × `pixel_scale` (told px per scene px)."""
    delta = np.eye(4)
    rotvec = np.asarray(error.rotation_error, dtype=np.float64)
    angle = float(np.linalg.norm(rotvec))
    if angle > 0:
        delta[:3, :3] = quat_to_mat(axis_angle_quat(rotvec, angle))
    delta[:3, 3] = error.translation_error
    X_WC = told.X_WC_array @ delta
    X_WC[3] = (0.0, 0.0, 0.0, 1.0)
    K = told.K_array.copy()
    K[0, 0] *= error.focal_scale
    K[1, 1] *= error.focal_scale
    K[0, 2] += error.principal_offset[0] * pixel_scale[0]
    K[1, 2] += error.principal_offset[1] * pixel_scale[1]
    as_rows = lambda m: tuple(tuple(float(v) for v in row) for row in m)  # noqa: E731
    return dataclasses.replace(told, K=as_rows(K), X_WC=as_rows(X_WC))  # type: ignore[arg-type]


def surrogate_cameras(
    scene: SceneSpec, gap: GapProfile, size: tuple[int, int] | None = None
) -> tuple[tuple[CameraSpec, ...], tuple[CameraSpec, ...]]:
    """(told, true) cameras: what the twin is told (the scene's, at `size` (w, h) px if given) and where
    the real cameras are (with the profile's calibration error)."""
    told, true = [], []
    for cam in scene.cameras:
        seen = cam.resized(*size) if size is not None else cam
        told.append(seen)
        true.append(perturb_camera(seen, gap.camera_gap(cam.name), (seen.width / cam.width, seen.height / cam.height)))
    return tuple(told), tuple(true)


def _v(values: object) -> str:
    return " ".join(f"{float(x):.6g}" for x in np.atleast_1d(np.asarray(values, dtype=np.float64)))


_LOOKS = """<mujoco>
  <visual>
    <global offwidth="{w}" offheight="{h}"/>
    <quality shadowsize="{shadow}" offsamples="0"/>
    <headlight ambient="0 0 0" diffuse="{head}" specular="0.05 0.05 0.05"/>
    <map znear="0.005" zfar="5"/>
  </visual>
  <statistic extent="{extent}" center="0 0 0.3"/>
  <asset>
    <texture name="sky" type="skybox" builtin="gradient" rgb1=".62 .66 .7" rgb2=".2 .2 .22" width="64" height="64"/>
    <texture name="wood" type="2d" builtin="flat" rgb1="{wood}" rgb2="{grain}" mark="random" random="0.3"
             width="512" height="512"/>
    <material name="table" texture="wood" texrepeat="2 2" specular="0.2" shininess="0.3"/>
    <material name="table_edge" rgba="{edge} 1" specular="0.1"/>
    <material name="robot_white" rgba=".94 .94 .93 1" specular="0.5" shininess="0.6"/>
    <material name="metal" rgba=".36 .37 .4 1" specular="0.9" shininess="0.85"/>
    <material name="board_white" rgba=".9 .9 .88 1" specular="0.05" shininess="0.1"/>
    <material name="board_black" rgba=".06 .06 .06 1" specular="0.05" shininess="0.1"/>
  </asset>
  <worldbody>
    <light name="{key}" directional="true" castshadow="{cast}" pos="{key_pos}" dir="{key_dir}" diffuse="{key_rgb}"
           ambient="{ambient}" specular="{spec}"/>
    <light name="{fill}" directional="true" castshadow="false" pos="{fill_pos}" dir="{fill_dir}" diffuse="{fill_rgb}"
           specular="{fill_spec}"/>
    <geom name="table_body" type="box" pos="0 0 -0.0205" size="{half} 0.02" contype="0" conaffinity="0"
          material="table_edge"/>
  </worldbody>
</mujoco>"""
"""Offscreen buffer, lights, room and materials of the real scene (a wood-coloured table, white arm)."""


def _add_looks(root: ET.Element, scene: SceneSpec, light: LightingGap, offsize: tuple[int, int]) -> None:
    """Insert `_LOOKS` (and one material per object) into the twin's model; its lights are replaced."""
    wood = np.asarray(scene.ground.color)
    key, fill = (np.asarray(d) / np.linalg.norm(d) for d in (light.key_direction, light.fill_direction))
    looks = ET.fromstring(
        _LOOKS.format(
            w=offsize[0],
            h=offsize[1],
            shadow=max(light.shadow_size, 1),
            head=_v([light.headlight] * 3),
            extent=SCENE_EXTENT,
            wood=_v(wood),
            grain=_v(wood * 0.88),
            edge=_v(wood * 0.7),
            key=KEY_LIGHT,
            cast=str(light.shadow_size > 0).lower(),
            key_pos=_v(-2 * key),
            key_dir=_v(key),
            key_rgb=_v(light.key_color),
            ambient=_v(light.ambient),
            spec=_v([light.specular] * 3),
            fill=FILL_LIGHT,
            fill_pos=_v(-2 * fill),
            fill_dir=_v(fill),
            fill_rgb=_v(light.fill_color),
            fill_spec=_v([0.3 * light.specular] * 3),
            half=_v(scene.ground.size),
        )
    )
    world = root.find("worldbody")
    assert world is not None
    for old in world.findall("light"):
        world.remove(old)
    for k, section in enumerate(looks):
        if section.tag == "worldbody":
            world.extend(section)
        else:
            root.insert(1 + k, section)
    asset = root.find("asset")
    assert asset is not None
    for obj in scene.objects:
        _sub(asset, "material", name=f"{obj.name}_material", rgba=(*obj.color, 1.0), specular=0.3, shininess=0.4)


def _real_boxes(obj: ObjectSpec, og: ObjectGap) -> tuple[BoxSpec, ...] | None:
    """The boxes (body frame, m) the real object collides on; None: its sphere set."""
    if og.shape == "spheres":
        return None
    if og.boxes is not None:
        return og.boxes
    if obj.boxes is None:
        log.debug("object %r is described without boxes: its exact shape is its sphere set", obj.name)
    return obj.boxes


def _real_inertia(obj: ObjectSpec, og: ObjectGap, mass: float, boxes: tuple[BoxSpec, ...] | None) -> InertiaSpec:
    """The real object's centre of mass (body frame, m; before `og.com_offset`) and inertia about it (kg·m²) at
    its true `mass` kg, as `ObjectGap` states: the described centre of mass (moved with the centroid by a shape
    gap); uniform density over `boxes`, or the described inertia scaled by the mass ratio for the sphere set."""
    described = obj.inertia or sphere_union_inertia(obj.spheres, obj.mass)
    if boxes is None:
        return InertiaSpec(com=described.com, inertia=tuple(v * mass / obj.mass for v in described.inertia))  # type: ignore[arg-type]
    real = box_union_inertia(boxes, mass)
    if og.boxes is None:
        return InertiaSpec(com=described.com, inertia=real.inertia)
    if obj.boxes is not None:
        shape = box_union_inertia(obj.boxes, obj.mass)
    else:
        shape = sphere_union_inertia(obj.spheres, obj.mass)
    com = np.asarray(described.com) + np.asarray(real.com) - np.asarray(shape.com)
    return InertiaSpec(com=(float(com[0]), float(com[1]), float(com[2])), inertia=real.inertia)


def _real_object(body: ET.Element, obj: ObjectSpec, gap: GapProfile) -> None:
    """Give an object body (as the twin's MJCF wrote it) its true shape, mass, COM and friction."""
    og = gap.object_gap(obj.name)
    mass = obj.mass * og.mass_scale
    boxes = _real_boxes(obj, og)
    inertia = _real_inertia(obj, og, mass, boxes)
    # The inertia about the COM is kept when the COM is displaced: the offset is a few mm.
    com = np.asarray(inertia.com) + np.asarray(og.com_offset)
    inertial = body.find("inertial")
    assert inertial is not None
    inertial.attrib.update(pos=" ".join(map(repr, com.tolist())), mass=repr(mass))
    inertial.set("fullinertia", " ".join(repr(float(v)) for v in inertia.inertia))
    spheres = body.findall("geom")
    template = dict(spheres[0].attrib)
    friction = [float(v) for v in template["friction"].split()]
    friction[0] = obj.friction * og.friction_scale
    common = {k: template[k] for k in ("priority", "contype", "conaffinity")}
    common.update(friction=" ".join(map(repr, friction)), material=f"{obj.name}_material", mass="0")
    if boxes is None:
        for g in spheres:
            g.attrib.pop("rgba", None)
            g.attrib.update(common)
        return
    for g in spheres:
        body.remove(g)
    for k, box in enumerate(boxes):
        _sub(body, "geom", name=f"{obj.name}_box{k}", type="box", pos=box.center, size=box.half, **common)


def _real_arm(root: ET.Element, scene: SceneSpec, arm: ArmGap) -> None:
    """Torque motors instead of servos; joint friction; the controller's gravity compensation."""
    n = len(scene.robot.joints)
    for name in ("kp", "kv", "joint_friction", "joint_offset"):
        if len(getattr(arm, name)) != n:
            raise SpecError(f"arm.{name}", f"must have one value per robot joint ({n}), got {len(getattr(arm, name))}")
    joints = {j.get("name"): j for j in root.iter("joint")}
    for joint, friction in zip(scene.robot.joints, arm.joint_friction):
        joints[joint.name].set("frictionloss", repr(friction))
    for body in root.iter("body"):
        if "gravcomp" in body.attrib:
            body.set("gravcomp", repr(arm.gravity_compensation))
    capsules = {f"{link}_c{k}" for i, link in enumerate(panda.LINK_NAMES) for k in range(len(panda.LINK_CAPSULES[i]))}
    for geom in root.iter("geom"):
        name = geom.get("name", "")
        if name in capsules or name == panda.PUSHER_GEOM:
            geom.attrib.pop("rgba", None)
            geom.set("material", "metal" if name == panda.PUSHER_GEOM else "robot_white")
    actuators = root.find("actuator")
    assert actuators is not None
    actuators.clear()
    for joint in scene.robot.joints:
        _sub(
            actuators,
            "motor",
            name=MOTOR_PREFIX + joint.name,
            joint=joint.name,
            ctrlrange=(-joint.effort, joint.effort),
        )


def _add_camera(world: ET.Element, cam: CameraSpec) -> None:
    X_WC = cam.X_WC_array
    # MuJoCo cameras look along -z with y up; OpenCV along +z with y down. MuJoCo's principal offset is
    # measured with the opposite sign to (c − size/2) on both axes (checked by the projection test).
    K = cam.K_array
    _sub(
        world,
        "camera",
        name=cam.name,
        pos=X_WC[:3, 3],
        quat=mat_to_quat(X_WC[:3, :3] @ np.diag([1.0, -1.0, -1.0])),
        resolution=f"{cam.width} {cam.height}",
        sensorsize=(cam.width * SENSOR_PITCH, cam.height * SENSOR_PITCH),
        focalpixel=(K[0, 0], K[1, 1]),
        principalpixel=(cam.width / 2 - K[0, 2], cam.height / 2 - K[1, 2]),
    )


def sampled_camera(cam: CameraSpec, samples: int) -> CameraSpec:
    """`cam` imaging at `samples` × its resolution (intrinsics scaled): the grid of point samples whose
    `samples` × `samples` blocks average to `cam`'s pixels (`average_samples`)."""
    return cam if samples == 1 else cam.resized(cam.width * samples, cam.height * samples)


def average_samples(image: np.ndarray, samples: int) -> np.ndarray:
    """Pixels (H, W, C) from point samples (H·s, W·s, C), s = `samples`: the mean of each s × s block (float32;
    s = 1: `image` itself, unconverted)."""
    if samples == 1:
        return image
    h, w = image.shape[0] // samples, image.shape[1] // samples
    blocks = image.reshape(h, samples, w, samples, image.shape[2]).astype(np.float32)
    return blocks.mean(axis=(1, 3))


def _add_board(world: ET.Element, board: DotBoard) -> None:
    """The calibration board where it truly lies: a white plate with black dots, visual only (no contacts), in
    geom group `BOARD_GROUP`. The dots' tops are the printed face (`thickness` above the table); the plate's top
    lies 0.2 mm below them (no depth fighting)."""
    body = _sub(world, "body", name=BOARD_BODY, pos=(*board.center, 0.0),
                quat=(math.cos(board.yaw / 2), 0.0, 0.0, math.sin(board.yaw / 2)))  # fmt: skip
    visual = {"contype": "0", "conaffinity": "0", "group": str(BOARD_GROUP), "mass": "0"}
    plate = max(board.thickness - 2e-4, 1e-4)  # the plate's height
    _sub(body, "geom", name=f"{BOARD_BODY}_plate", type="box", pos=(0.0, 0.0, plate / 2),
         size=(*board.half_size, plate / 2), material="board_white", **visual)  # fmt: skip
    for k, (x, y) in enumerate(board.dots_local()):
        _sub(body, "geom", name=f"{BOARD_BODY}_dot{k}", type="cylinder", pos=(x, y, board.thickness - 1e-4),
             size=(board.radius, 1e-4), material="board_black", **visual)  # fmt: skip


def surrogate_mjcf(
    scene: SceneSpec, gap: GapProfile, cameras: tuple[CameraSpec, ...], board: DotBoard | None = None
) -> str:
    """MJCF XML of the real world: the scene under `gap`, rendered through `cameras` (the true ones), with the
    calibration `board` (the told one; drawn at its pose + `gap.board_error`; None: no board) hidden in geom
    group `BOARD_GROUP`.

    Physics timestep = the arm's control period. Keyframe "home": the scene's own start state as
    `SurrogateWorld.reset` sets it (true joints at `robot.home`, objects at their poses), motors off.
    Raises `SpecError` naming the field if the profile does not fit the scene.
    """
    for og in gap.objects:
        if og.name != WILDCARD and og.name not in {o.name for o in scene.objects}:
            log.warning("gap profile: scene %r has no object %r; its entry is unused", scene.name, og.name)
    twin_xml = scene_to_mjcf(dataclasses.replace(scene, cameras=()), MjcfOptions(timestep=gap.arm.control_dt))
    root = ET.fromstring(twin_xml)
    # Each camera renders at its size × its pixel_samples; the world averages the samples down to its pixels.
    rendered = tuple(sampled_camera(c, gap.camera_gap(c.name).pixel_samples) for c in cameras)
    offsize = (max((c.width for c in rendered), default=1), max((c.height for c in rendered), default=1))
    _add_looks(root, scene, gap.lighting, offsize)
    world = root.find("worldbody")
    assert world is not None
    for geom in world.findall("geom"):
        if geom.get("name") == GROUND_GEOM:
            geom.attrib.pop("rgba", None)
            geom.set("material", "table")
    bodies = {b.get("name"): b for b in world.iter("body")}
    for obj in scene.objects:
        _real_object(bodies[obj.name], obj, gap)
    _real_arm(root, scene, gap.arm)
    for cam in rendered:
        _add_camera(world, cam)
    if board is not None:
        _add_board(world, board.placed(gap.board_error))
    key = root.find(f"keyframe/key[@name='{KEYFRAME_HOME}']")
    assert key is not None
    qpos = list(scene.robot.home)
    for obj in scene.objects:
        qpos += [*obj.pose.pos, *obj.pose.quat]
    key.set("qpos", " ".join(repr(float(v)) for v in qpos))
    key.set("ctrl", " ".join(["0.0"] * len(scene.robot.joints)))
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")


class ArmController:
    """The real arm's joint controller, run every control tick on the encoder readings.

    τ = kp (q_c − q_enc) + kv (q̇_c − q̇), clamped to the joint torque limits, where q_c is the latest
    command that has come through the latency (a FIFO; a command sent at tick n acts from tick
    n + round(latency / dt)) and q̇_c is its rate of change, low-passed with time constant
    `feedforward_filter` (the drive's velocity feed-forward) and clipped to the velocity limits.
    Gravity is compensated by the model's `gravcomp`; joint friction acts in the physics.
    """

    def __init__(self, arm: ArmGap, effort: ArrayLike, velocity: ArrayLike) -> None:
        self.arm = arm
        self.dt = arm.control_dt
        self.delay_ticks = round(arm.latency / self.dt)
        self._kp, self._kv = np.asarray(arm.kp), np.asarray(arm.kv)
        self._effort, self._vmax = np.asarray(effort, dtype=np.float64), np.asarray(velocity, dtype=np.float64)
        tau = arm.feedforward_filter
        self._alpha = self.dt / (tau + self.dt) if tau > 0 else 0.0
        self._fifo: collections.deque[tuple[int, np.ndarray]] = collections.deque()
        self.q_c = np.zeros(len(self._kp))
        self.qd_c = np.zeros(len(self._kp))

    def reset(self, q_c: ArrayLike) -> None:
        """Hold `q_c` (J,) rad at rest; forget pending commands."""
        self._fifo.clear()
        self.q_c = np.array(q_c, dtype=np.float64)
        self.qd_c = np.zeros_like(self.q_c)

    def send(self, q: np.ndarray, tick: int) -> None:
        """Queue a (checked, clipped) command (J,) rad sent at control tick `tick`."""
        self._fifo.append((tick + self.delay_ticks, q.copy()))

    def torque(self, tick: int, q_enc: np.ndarray, qd: np.ndarray) -> np.ndarray:
        """Motor torques (J,) N·m for control tick `tick` from encoder positions and velocities (J,)."""
        q_prev = self.q_c
        while self._fifo and self._fifo[0][0] <= tick:
            self.q_c = self._fifo.popleft()[1]
        if self._alpha > 0:
            raw = (self.q_c - q_prev) / self.dt
            self.qd_c = np.clip(self.qd_c + self._alpha * (raw - self.qd_c), -self._vmax, self._vmax)
        tau = self._kp * (self.q_c - q_enc) + self._kv * (self.qd_c - qd)
        return np.clip(tau, -self._effort, self._effort)


def hand_blob(height: int, width: int, center: tuple[float, float], size: float) -> tuple[np.ndarray, np.ndarray]:
    """A hand reaching in from the bottom edge: alpha (H, W) in [0, 1] and shaded colour (H, W, 3), 0–255.

    Palm centre at `center` (fractions of width, height); palm and fingers span `size` × height px.
    """
    s = size * height
    cx, cy = center[0] * width, center[1] * height
    capsules = [((cx, cy), (cx + 0.15 * s, height + s), 0.3 * s), ((cx, cy - 0.05 * s), (cx, cy + 0.12 * s), 0.4 * s)]
    for k, dx in enumerate((-0.3, -0.1, 0.1, 0.3)):
        reach = 0.75 + (0.12 if k in (1, 2) else 0.0)
        capsules.append(((cx + dx * s, cy - 0.3 * s), (cx + 1.4 * dx * s, cy - reach * s), 0.09 * s))
    capsules.append(((cx + 0.3 * s, cy), (cx + 0.72 * s, cy - 0.28 * s), 0.1 * s))
    v, u = np.mgrid[0:height, 0:width].astype(np.float32) + 0.5
    sdf = np.full((height, width), np.inf, dtype=np.float32)
    for (ax, ay), (bx, by), r in capsules:
        dx, dy = bx - ax, by - ay
        t = np.clip(((u - ax) * dx + (v - ay) * dy) / (dx * dx + dy * dy), 0.0, 1.0)
        sdf = np.minimum(sdf, np.hypot(u - ax - t * dx, v - ay - t * dy) - r)
    alpha = np.clip(0.5 - sdf, 0.0, 1.0)
    shade = 0.72 + 0.28 * np.clip(-sdf / (0.25 * s), 0.0, 1.0)
    return alpha, SKIN * shade[..., None]


def develop(image: np.ndarray, gap: CameraGap, noise: np.ndarray) -> np.ndarray:
    """The camera's own image formation on a rendered (H, W, 3) image (0–255): exposure and white-balance
    gains, then additive noise `noise` (H, W, 3) × gap.noise_std (0–255 units), rounded, clipped to uint8."""
    out = image.astype(np.float32) * (gap.exposure * np.asarray(gap.white_balance, dtype=np.float32))
    if gap.noise_std > 0:
        out += noise * np.float32(gap.noise_std)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


class NoiseBank:
    """Unit Gaussian noise images, cheaply: windows at random offsets into one seeded buffer of 4× the image.

    Drawing fresh normals costs ~11 ns per value (4 ms per 480×270 image); a window costs a slice. The
    window of (frame, camera) is chosen by a generator seeded with (seed, frame, camera), so it does not
    depend on which frames were rendered before.
    """

    def __init__(self, seed: int, shape: tuple[int, ...]) -> None:
        self.seed, self.shape, self._n = seed, shape, math.prod(shape)
        self._buffer = np.random.default_rng([seed, 0x6E6F697365]).standard_normal(4 * self._n, dtype=np.float32)

    def sample(self, frame: int, camera: int) -> np.ndarray:
        """Noise (shape) float32 for one camera at one frame."""
        start = int(np.random.default_rng([self.seed, frame, camera]).integers(3 * self._n + 1))
        return self._buffer[start : start + self._n].reshape(self.shape)
