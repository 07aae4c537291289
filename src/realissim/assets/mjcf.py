"""MJCF generation: a scene description becomes a MuJoCo model (XML text).

Collision filtering (contype / conaffinity bits): the table and objects collide with each other; arm
links collide with objects only; the pusher rod collides with objects and the table. Object geoms have
priority over the table and the robot, so an object's own friction coefficient governs its contacts.
Each joint's servo is a joint impedance controller τ = kp (q′ − q) + kv (q̇′ − q̇): a position actuator
(target q′, clipped to the joint range) plus a velocity actuator (target q̇′, clipped to the velocity
limit), their sum clamped to the joint torque limit. Damping the velocity *error* rather than the
velocity lets the arm follow a moving target without a lag proportional to its speed. Gravity is
compensated on every robot link (`gravcomp`).
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from typing import Literal

import numpy as np

from realissim.assets import panda
from realissim.assets.mass import sphere_union_inertia
from realissim.geometry import mat_to_quat
from realissim.spec.errors import SpecError
from realissim.spec.scene import CameraSpec, ObjectSpec, PusherSpec, SceneSpec

GROUND_GEOM = "table"
KEYFRAME_HOME = "home"

# (contype, conaffinity) per class of geom.
_TABLE_BITS = (1, 1)
_OBJECT_BITS = (1, 3)
_LINK_BITS = (2, 0)
_ROD_BITS = (2, 1)


@dataclass(frozen=True)
class MjcfOptions:
    """How the MuJoCo model is assembled."""

    timestep: float = 1.0 / 240.0
    """Physics step, s."""
    kp: tuple[float, ...] = panda.DEFAULT_KP
    """Joint servo stiffness per joint, N·m/rad."""
    kv: tuple[float, ...] = panda.DEFAULT_KV
    """Joint servo damping per joint, N·m·s/rad."""
    integrator: Literal["implicitfast", "Euler", "RK4", "implicit"] = "implicitfast"
    cone: Literal["elliptic", "pyramidal"] = "elliptic"
    """Friction cone; elliptic is both faster here (fewer constraint rows) and closer to Coulomb."""
    gravity: bool = True


def _fmt(values: object) -> str:
    arr = np.atleast_1d(np.asarray(values, dtype=np.float64))
    return " ".join(repr(float(v)) for v in arr)


def _attr(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    return _fmt(value)


def _sub(parent: ET.Element, tag: str, **attrs: object) -> ET.Element:
    return ET.SubElement(parent, tag, {k: _attr(v) for k, v in attrs.items()})


def _check_robot(scene: SceneSpec, options: MjcfOptions) -> None:
    robot = scene.robot
    if robot.model != panda.MODEL_NAME:
        raise SpecError("robot.model", f"unknown robot model {robot.model!r} (known: {panda.MODEL_NAME!r})")
    if robot.joint_names != panda.JOINT_NAMES:
        raise SpecError("robot.joints", f"joint names must be {list(panda.JOINT_NAMES)} in that order")
    for name in ("kp", "kv"):
        gains = getattr(options, name)
        if len(gains) != len(robot.joints) or min(gains) <= 0:
            raise ValueError(f"MjcfOptions.{name}: need {len(robot.joints)} positive gains, got {gains}")


def _add_robot(world: ET.Element, scene: SceneSpec) -> None:
    robot = scene.robot
    base = _sub(world, "body", name=panda.LINK_NAMES[0], pos=robot.base.pos, quat=robot.base.quat)
    _add_link_content(base, 0)
    parent = base
    for i, joint in enumerate(robot.joints, start=1):
        pos, quat = panda.link_frame_offset(i)
        body = _sub(parent, "body", name=panda.LINK_NAMES[i], pos=pos, quat=quat, gravcomp=1.0)
        _sub(
            body,
            "joint",
            name=joint.name,
            axis=(0, 0, 1),
            range=(joint.lower, joint.upper),
            armature=panda.ARMATURE,
            actuatorfrcrange=(-joint.effort, joint.effort),
        )
        _add_link_content(body, i)
        parent = body
    _sub(parent, "site", name=panda.FLANGE_SITE, pos=(0, 0, panda.FLANGE_OFFSET), size=0.005)
    if robot.pusher is not None:
        _add_pusher(parent, robot.pusher)


def _add_link_content(body: ET.Element, i: int) -> None:
    mass, com, (ixx, iyy, izz, ixy, ixz, iyz) = panda.LINK_INERTIALS[i]
    _sub(body, "inertial", pos=com, mass=mass, fullinertia=(ixx, iyy, izz, ixy, ixz, iyz))
    for k, (start, end, radius) in enumerate(panda.LINK_CAPSULES[i]):
        _sub(
            body,
            "geom",
            name=f"{panda.LINK_NAMES[i]}_c{k}",
            type="capsule",
            fromto=(*start, *end),
            size=radius,
            contype=_LINK_BITS[0],
            conaffinity=_LINK_BITS[1],
            rgba=(0.92, 0.92, 0.92, 1.0),
            mass=0.0,
        )


def _add_pusher(flange_parent: ET.Element, pusher: PusherSpec) -> None:
    body = _sub(flange_parent, "body", name=panda.PUSHER_BODY, pos=(0, 0, panda.FLANGE_OFFSET), gravcomp=1.0)
    mass = panda.PUSHER_DENSITY * math.pi * pusher.radius**2 * pusher.length
    izz = 0.5 * mass * pusher.radius**2
    ixx = mass * (3 * pusher.radius**2 + pusher.length**2) / 12.0
    _sub(body, "inertial", pos=(0, 0, pusher.length / 2), mass=mass, diaginertia=(ixx, ixx, izz))
    _sub(
        body,
        "geom",
        name=panda.PUSHER_GEOM,
        type="capsule",
        fromto=(0, 0, 0, 0, 0, pusher.length),
        size=pusher.radius,
        contype=_ROD_BITS[0],
        conaffinity=_ROD_BITS[1],
        rgba=(0.3, 0.3, 0.32, 1.0),
        mass=0.0,
    )
    _sub(body, "site", name=panda.TIP_SITE, pos=(0, 0, pusher.length), size=0.004)


def _add_object(world: ET.Element, obj: ObjectSpec) -> None:
    body = _sub(world, "body", name=obj.name, pos=obj.pose.pos, quat=obj.pose.quat)
    _sub(body, "freejoint", name=obj.name)
    inertia = obj.inertia or sphere_union_inertia(obj.spheres, obj.mass)
    _sub(body, "inertial", pos=inertia.com, mass=obj.mass, fullinertia=inertia.inertia)
    for k, (center, radius) in enumerate(zip(obj.spheres.centers, obj.spheres.radii)):
        _sub(
            body,
            "geom",
            name=f"{obj.name}_s{k}",
            type="sphere",
            pos=center,
            size=radius,
            friction=(obj.friction, 0.005, 0.0001),
            priority=1,
            contype=_OBJECT_BITS[0],
            conaffinity=_OBJECT_BITS[1],
            rgba=(*obj.color, 1.0),
            mass=0.0,
        )


def _add_camera(world: ET.Element, cam: CameraSpec) -> None:
    X_WC = cam.X_WC_array
    # MuJoCo cameras look along -z with y up; OpenCV looks along +z with y down.
    rot = X_WC[:3, :3] @ np.diag([1.0, -1.0, -1.0])
    fovy = 2.0 * math.degrees(math.atan(0.5 * cam.height / cam.K[1][1]))
    _sub(world, "camera", name=cam.name, pos=X_WC[:3, 3], quat=mat_to_quat(rot), fovy=fovy)


def scene_to_mjcf(scene: SceneSpec, options: MjcfOptions = MjcfOptions()) -> str:
    """The MJCF XML for `scene`: robot with servos, free objects of spheres, table plane, cameras.

    The keyframe "home" holds the robot at `robot.home` (targets equal) and objects at their poses.
    Raises `SpecError` if the scene names an unknown robot model or mismatched joints.
    """
    _check_robot(scene, options)
    root = ET.Element("mujoco", model=scene.name)
    _sub(root, "compiler", angle="radian", autolimits="true")
    _sub(
        root,
        "option",
        timestep=options.timestep,
        integrator=options.integrator,
        cone=options.cone,
        gravity=(0, 0, -9.81 if options.gravity else 0.0),
    )
    _sub(root, "size", memory="8M")
    world = _sub(root, "worldbody")
    _sub(world, "light", name="sun", pos=(0, 0, 2.5), dir=(0, 0, -1), directional="true")
    _sub(
        world,
        "geom",
        name=GROUND_GEOM,
        type="plane",
        size=(*scene.ground.size, 0.05),
        friction=(scene.ground.friction, 0.005, 0.0001),
        contype=_TABLE_BITS[0],
        conaffinity=_TABLE_BITS[1],
        rgba=(*scene.ground.color, 1.0),
    )
    _add_robot(world, scene)
    for obj in scene.objects:
        _add_object(world, obj)
    for cam in scene.cameras:
        _add_camera(world, cam)
    actuators = _sub(root, "actuator")
    # Servo torque τ = kp (q′ − q) + kv (q̇′ − q̇), the sum clamped to the joint's torque limit.
    for name, joint, kp in zip(panda.ACTUATOR_NAMES, scene.robot.joints, options.kp):
        _sub(actuators, "position", name=name, joint=joint.name, kp=kp, ctrlrange=(joint.lower, joint.upper))
    for name, joint, kv in zip(panda.DAMPER_NAMES, scene.robot.joints, options.kv):
        _sub(actuators, "velocity", name=name, joint=joint.name, kv=kv, ctrlrange=(-joint.velocity, joint.velocity))
    qpos = list(scene.robot.home)
    for obj in scene.objects:
        qpos += [*obj.pose.pos, *obj.pose.quat]
    keyframes = _sub(root, "keyframe")
    ctrl = list(scene.robot.home) + [0.0] * len(scene.robot.joints)
    _sub(keyframes, "key", name=KEYFRAME_HOME, qpos=qpos, ctrl=ctrl)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode")
