"""Franka Emika Panda: names, kinematics, limits and inertias, written down once.

Sources (public):
- Kinematics: Franka's published modified (Craig) Denavit–Hartenberg table, with the flange 0.107 m
  along joint 7's axis (Franka Control Interface documentation, "Robot and interface specifications").
- Joint limits (position, velocity, acceleration, jerk, torque): the same documentation's limit table
  for the Panda (FER) arm.
- Link masses, centres of mass and inertias: the dynamic identification of Gaz et al., "Dynamic
  Identification of the Franka Emika Panda Robot With Retrieval of Feasible Parameters Using
  Penalty-Based Optimization", IEEE RA-L 2019 — the values franka_description and MuJoCo Menagerie
  ship. They are identified, not measured, and good to roughly 10 %.
- Collision capsules: approximations of each link's outer shape from the datasheet's dimension
  drawing, to within about 2 cm; they matter only where a link could touch a tabletop object.
- Rotor (reflected) inertia: a uniform 0.1 kg·m² armature per joint, an approximation of the
  order of Franka's published reflected inertias; it also keeps the stiff joint servo stable at
  the twin's physics timestep.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from realissim.spec.scene import JointSpec, Pose, PusherSpec, RobotSpec

MODEL_NAME = "franka_panda"
JOINT_NAMES: tuple[str, ...] = tuple(f"panda_joint{i}" for i in range(1, 8))
"""Joint order of every joint array in realissim for this robot."""
LINK_NAMES: tuple[str, ...] = tuple(f"panda_link{i}" for i in range(0, 8))
"""Body names, base first."""
PUSHER_BODY = "panda_pusher"
PUSHER_GEOM = "panda_pusher_rod"
FLANGE_SITE = "panda_flange"
TIP_SITE = "panda_pusher_tip"
ACTUATOR_NAMES: tuple[str, ...] = tuple(f"panda_servo{i}" for i in range(1, 8))
"""Position servos (target q′), one per joint."""
DAMPER_NAMES: tuple[str, ...] = tuple(f"panda_damper{i}" for i in range(1, 8))
"""Velocity servos (target q̇′), one per joint."""

# Modified DH: (a_{i-1} [m], d_i [m], alpha_{i-1} [rad]) for joints 1..7; theta_i = q_i.
DH_TABLE: tuple[tuple[float, float, float], ...] = (
    (0.0, 0.333, 0.0),
    (0.0, 0.0, -math.pi / 2),
    (0.0, 0.316, math.pi / 2),
    (0.0825, 0.0, math.pi / 2),
    (-0.0825, 0.384, -math.pi / 2),
    (0.0, 0.0, math.pi / 2),
    (0.088, 0.0, math.pi / 2),
)
FLANGE_OFFSET = 0.107
"""Distance from joint 7's frame to the flange along its z axis, m."""

Q_LOWER = (-2.8973, -1.7628, -2.8973, -3.0718, -2.8973, -0.0175, -2.8973)
Q_UPPER = (2.8973, 1.7628, 2.8973, -0.0698, 2.8973, 3.7525, 2.8973)
VELOCITY_LIMIT = (2.1750, 2.1750, 2.1750, 2.1750, 2.6100, 2.6100, 2.6100)
ACCELERATION_LIMIT = (15.0, 7.5, 10.0, 12.5, 15.0, 20.0, 20.0)
JERK_LIMIT = (7500.0, 3750.0, 5000.0, 6250.0, 7500.0, 10000.0, 10000.0)
TORQUE_LIMIT = (87.0, 87.0, 87.0, 87.0, 12.0, 12.0, 12.0)
CARTESIAN_SPEED_LIMIT = 1.7
"""Published largest translational speed of the flange, m/s."""

READY_Q = (0.0, -math.pi / 4, 0.0, -3 * math.pi / 4, 0.0, math.pi / 2, math.pi / 4)
"""Franka's documented "ready" configuration."""
READY_FLANGE_POS = (0.3069, 0.0, 0.5903)
"""Flange position at READY_Q in the base frame: libfranka's published end-effector pose at the
ready configuration, (0.3069, 0, 0.4869) with the Franka Hand, minus the hand's 0.1034 m offset."""

DEFAULT_KP = (4500.0, 4500.0, 3500.0, 3500.0, 2000.0, 2000.0, 2000.0)
"""Twin joint servo stiffness, N·m/rad (as in MuJoCo Menagerie's Panda)."""
DEFAULT_KV = (180.0, 180.0, 120.0, 120.0, 40.0, 40.0, 30.0)
"""Twin joint servo damping, N·m·s/rad."""
ARMATURE = 0.1
"""Reflected rotor inertia per joint, kg·m²."""

# (mass kg, centre of mass m, [Ixx, Iyy, Izz, Ixy, Ixz, Iyz] kg·m²) in each link's DH frame.
LINK_INERTIALS: tuple[tuple[float, tuple[float, float, float], tuple[float, ...]], ...] = (
    (0.629769, (-0.041018, -0.00014, 0.049974), (0.00315, 0.00388, 0.004285, 8.2904e-7, 0.00015, 8.2299e-6)),
    (4.970684, (0.003875, 0.002081, -0.04762), (0.70337, 0.70661, 0.009117, -0.000139, 0.006772, 0.019169)),
    (0.646926, (-0.003141, -0.02872, 0.003495), (0.007962, 0.02811, 0.025995, -0.003925, 0.010254, 0.000704)),
    (3.228604, (0.027518, 0.039252, -0.066502), (0.037242, 0.036155, 0.01083, -0.004761, -0.011396, -0.012805)),
    (3.587895, (-0.05317, 0.104419, 0.027454), (0.025853, 0.019552, 0.028323, 0.007796, -0.001332, 0.008641)),
    (1.225946, (-0.011953, 0.041065, -0.038437), (0.035549, 0.029474, 0.008627, -0.002117, -0.004037, 0.000229)),
    (1.666555, (0.060149, -0.014117, -0.010517), (0.001964, 0.004354, 0.005433, 0.000109, -0.001158, 0.000341)),
    (0.735522, (0.010517, -0.004252, 0.061597), (0.012516, 0.010027, 0.004815, -0.000428, -0.001196, -0.000741)),
)

# Collision capsules per link, (from, to, radius) in the link's DH frame, m.
LINK_CAPSULES: tuple[tuple[tuple[tuple[float, float, float], tuple[float, float, float], float], ...], ...] = (
    (((-0.03, 0.0, 0.07), (0.0, 0.0, 0.14), 0.08),),
    (((0.0, 0.0, -0.19), (0.0, 0.0, 0.0), 0.065),),
    (((0.0, 0.0, -0.06), (0.0, 0.0, 0.06), 0.06), ((0.0, 0.0, 0.0), (0.0, -0.21, 0.0), 0.06)),
    (((0.0, 0.0, -0.12), (0.0, 0.0, 0.0), 0.06), ((0.0825, 0.05, 0.0), (0.0825, -0.05, 0.0), 0.055)),
    (((0.0, 0.0, 0.0), (-0.0825, 0.08, 0.0), 0.055),),
    (((0.0, 0.0, -0.26), (0.0, 0.0, -0.02), 0.055),),
    (((0.0, 0.0, -0.04), (0.0, 0.0, 0.04), 0.05), ((0.0, 0.0, 0.0), (0.088, 0.0, 0.0), 0.05)),
    (((0.0, 0.0, -0.01), (0.0, 0.0, 0.07), 0.045),),
)

PUSHER_DENSITY = 2700.0
"""Aluminium rod, kg/m³."""


def link_frame_offset(i: int) -> tuple[np.ndarray, np.ndarray]:
    """Pose of link i's frame in link i-1's frame at q_i = 0: (pos (3,), quat wxyz (4,)); i in 1..7."""
    a, d, alpha = DH_TABLE[i - 1]
    pos = np.array([a, -d * math.sin(alpha), d * math.cos(alpha)])
    quat = np.array([math.cos(alpha / 2), math.sin(alpha / 2), 0.0, 0.0])
    return pos, quat


def dh_forward_kinematics(q: ArrayLike, tool_offset: float = FLANGE_OFFSET) -> np.ndarray:
    """Pose (4, 4) of the point `tool_offset` m along joint 7's axis in the base frame, from the DH table.

    Written independently of MuJoCo, as the reference the twin's model is checked against.
    """
    out = np.eye(4)
    for (a, d, alpha), theta in zip(DH_TABLE, np.asarray(q, dtype=np.float64)):
        ca, sa, ct, st = math.cos(alpha), math.sin(alpha), math.cos(theta), math.sin(theta)
        out = out @ np.array(
            [[ct, -st, 0, a], [st * ca, ct * ca, -sa, -d * sa], [st * sa, ct * sa, ca, d * ca], [0, 0, 0, 1]]
        )
    tool = np.eye(4)
    tool[2, 3] = tool_offset
    return out @ tool


def panda_joints() -> tuple[JointSpec, ...]:
    """The Panda's joints with their published limits, in model order."""
    return tuple(
        JointSpec(name, lo, hi, v, a, j, t)
        for name, lo, hi, v, a, j, t in zip(
            JOINT_NAMES, Q_LOWER, Q_UPPER, VELOCITY_LIMIT, ACCELERATION_LIMIT, JERK_LIMIT, TORQUE_LIMIT
        )
    )


def panda_robot_spec(base: Pose, home: tuple[float, ...] = READY_Q, pusher: PusherSpec | None = None) -> RobotSpec:
    """A RobotSpec for the Panda at `base`, starting at `home`, with an optional pusher rod."""
    return RobotSpec(model=MODEL_NAME, base=base, joints=panda_joints(), home=tuple(home), pusher=pusher)
