"""Robot and object assets: the Franka Panda with a pusher rod, the PushT T-block, MJCF generation."""

from realissim.assets.appearance import GROUND_BODY, AppearanceConfig, scene_gaussians
from realissim.assets.gaussians import GaussianArrays
from realissim.assets.mjcf import MjcfOptions, scene_to_mjcf
from realissim.assets.pusht import PushTConfig, TBlock, pusht_scene

__all__ = [
    "GROUND_BODY",
    "AppearanceConfig",
    "GaussianArrays",
    "MjcfOptions",
    "PushTConfig",
    "TBlock",
    "pusht_scene",
    "scene_gaussians",
    "scene_to_mjcf",
]
