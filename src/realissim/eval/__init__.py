"""Evaluation: `run_episode` (the one driver of episodes, success judged on ground truth) and, under `sync/`,
the twin-vs-truth sync metrics and scenario; policy evaluation (offline in parallel, online) builds on them."""
