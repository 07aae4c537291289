"""Scene description: dataclasses for robot, objects, ground and cameras, with strict JSON I/O."""

from realissim.spec.errors import SpecError
from realissim.spec.io import (
    load_gaussians,
    load_scene,
    save_scene,
    scene_from_dict,
    scene_from_json,
    scene_to_dict,
    scene_to_json,
)
from realissim.spec.scene import (
    CameraSpec,
    GaussianSetSpec,
    GoalSpec,
    GroundSpec,
    InertiaSpec,
    JointSpec,
    ObjectSpec,
    Pose,
    PusherSpec,
    RobotSpec,
    SceneSpec,
    SphereSetSpec,
)

__all__ = [
    "CameraSpec",
    "GaussianSetSpec",
    "GoalSpec",
    "GroundSpec",
    "InertiaSpec",
    "JointSpec",
    "ObjectSpec",
    "Pose",
    "PusherSpec",
    "RobotSpec",
    "SceneSpec",
    "SpecError",
    "SphereSetSpec",
    "load_gaussians",
    "load_scene",
    "save_scene",
    "scene_from_dict",
    "scene_from_json",
    "scene_to_dict",
    "scene_to_json",
]
