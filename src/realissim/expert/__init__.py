"""Demonstrators: scripted pusher motions, random pushes, the PushT expert; `registry.make_expert` finds a task's expert
by the task's own declaration."""
