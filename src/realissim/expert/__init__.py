"""Demonstrators: scripted pusher motions (and later planning experts and teleoperation)."""
