"""The digital twin: MuJoCo physics of a scene (single and batched) and its state."""

from realissim.twin.appearance import SceneAppearance
from realissim.twin.batch import BatchSnapshot, TwinBatch
from realissim.twin.physics import PhysicsConfig, PhysicsDivergedError, Snapshot, TwinPhysics
from realissim.twin.state import TwinLayout, TwinState

__all__ = [
    "BatchSnapshot",
    "PhysicsConfig",
    "PhysicsDivergedError",
    "SceneAppearance",
    "Snapshot",
    "TwinBatch",
    "TwinLayout",
    "TwinPhysics",
    "TwinState",
]
