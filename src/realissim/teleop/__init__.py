"""Browser teleoperation (viser): the operator drags the pusher tip's target; the twin's arm follows it by IK;
Start / Save / Discard record the twin's state into the episode store (source "teleop").

Layers, bottom to top: `policy` (target → joints, pure), `meshes` (the twin's geometry, pure), `session` (the
control thread: Env, episodes, store), `scene` and `panel` (the page), `server` (wires them, serves the page).
"""

from realissim.teleop.config import TeleopConfig
from realissim.teleop.policy import TeleopPolicy
from realissim.teleop.server import TeleopServer, run_teleop
from realissim.teleop.session import Snapshot, TeleopSession

__all__ = ["Snapshot", "TeleopConfig", "TeleopPolicy", "TeleopServer", "TeleopSession", "run_teleop"]
