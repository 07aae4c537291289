"""Policies and the seam every policy plugs into: `Observation` in, `ActionChunk` out (docs/design.md §7)."""

from realissim.policy.base import ActionChunk, Observation, PerEnvPolicies, PlansInPhysics, Policy

__all__ = ["ActionChunk", "Observation", "PerEnvPolicies", "PlansInPhysics", "Policy"]
