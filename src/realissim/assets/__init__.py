"""Robot and object assets: the Franka Panda with a pusher rod, the PushT T-block, MJCF generation."""

from realissim.assets.mjcf import MjcfOptions, scene_to_mjcf
from realissim.assets.pusht import PushTConfig, TBlock, pusht_scene

__all__ = ["MjcfOptions", "PushTConfig", "TBlock", "pusht_scene", "scene_to_mjcf"]
