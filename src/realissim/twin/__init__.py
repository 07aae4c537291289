"""The digital twin: MuJoCo physics of a scene (single and batched), its state, kinematics (pusher IK), dynamics
randomisation, resting poses and contact readers. What it looks like is `views`; what estimates it from images is
`estimate`."""

from realissim.twin.batch import BatchSnapshot, TwinBatch
from realissim.twin.physics import PhysicsConfig, PhysicsDivergedError, Snapshot, TwinPhysics
from realissim.twin.state import TwinLayout, TwinState

__all__ = [
    "BatchSnapshot",
    "PhysicsConfig",
    "PhysicsDivergedError",
    "Snapshot",
    "TwinBatch",
    "TwinLayout",
    "TwinPhysics",
    "TwinState",
]
