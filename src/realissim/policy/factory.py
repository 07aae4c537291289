"""Policies loaded by name: how evaluation, collection and the CLI obtain a trained policy without importing the
method that trained it (docs/design.md §7).

A learning method registers a *loader* under a kind name in the Python entry-point group `realissim.policies`
(realissim's own flow-matching learner registers "flow" in pyproject.toml); a user's package registers its own
the same way, or a kind may be given as "module:attribute". A loader reads a checkpoint file and returns a
`LoadedPolicy`: a `Policy` that also states what it observes (`ObservationNeeds`, which the environment's config
takes with `EnvConfig.observing`) and checks that a scene is one it can act in.

`CheckpointPolicy` is the picklable `PolicyFactory` that worker processes and Ray tasks rebuild a policy from: a
trained policy holds a traced network and a torch generator, so it travels as its path, not as an object.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from realissim.policy.base import Policy
from realissim.util.imports import resolve

if TYPE_CHECKING:
    from realissim.spec.scene import SceneSpec
    from realissim.tasks import Task

ENTRY_POINT_GROUP = "realissim.policies"
"""The entry-point group a learning method registers its checkpoint loader in."""


class CheckpointError(Exception):
    """A checkpoint that cannot be used: unreadable, not of the loader's format, or incompatible (with the scene,
    the observations asked for); the message names the file and the problem. Loaders raise it (or a subclass)."""


@dataclass(frozen=True)
class ObservationNeeds:
    """What a policy observes beyond the twin's state."""

    cameras: tuple[str, ...] = ()
    """Virtual cameras to render into each observation: scene camera names and/or "wrist"."""
    image_size: tuple[int, int] = (96, 96)
    """Their image size, px (width, height)."""
    real_images: bool = False
    """The real cameras' latest frames (online only)."""


@runtime_checkable
class LoadedPolicy(Policy, Protocol):
    """A policy read from a file: it says what it observes and refuses scenes it was not trained for."""

    @property
    def needs(self) -> ObservationNeeds:
        """What the environment must put into its observations for this policy."""
        ...

    def check_scene(self, scene: SceneSpec) -> None:
        """Raise (naming the first difference) if `scene` differs from the training scene in a part the policy
        depends on."""
        ...


class PolicyLoader(Protocol):
    """Reads the checkpoint at `path` into a policy: `steps` sampling steps for iterative samplers (None: the
    checkpoint's own), `seed` for its noise, `threads` for torch."""

    def __call__(self, path: str, *, steps: int | None = None, seed: int = 0, threads: int = 1) -> LoadedPolicy: ...


class PolicyFactory(Protocol):
    """Builds, inside a worker, the (batched) policy for `task` and a batch of `envs` environments. Must pickle."""

    def __call__(self, task: Task, envs: int) -> Policy: ...


def policy_loader(kind: str) -> PolicyLoader:
    """The loader registered as `kind` in the `realissim.policies` entry points, or the object named by
    "module:attribute"; ValueError naming the known kinds if there is none."""
    if ":" in kind:
        return resolve(kind)  # type: ignore[no-any-return]
    found = {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}
    if kind not in found:
        raise ValueError(
            f"policy kind {kind!r}: no loader registered in the {ENTRY_POINT_GROUP!r} entry points (known: "
            f"{sorted(found) or 'none: is realissim installed, e.g. pip install -e .?'}); or give 'module:attribute'"
        )
    return found[kind].load()


def load_policy(
    path: str, kind: str = "flow", *, steps: int | None = None, seed: int = 0, threads: int = 1
) -> LoadedPolicy:
    """The policy in the checkpoint at `path`, read by the loader of `kind` (see `policy_loader`)."""
    return policy_loader(kind)(str(path), steps=steps, seed=seed, threads=threads)


@dataclass(frozen=True)
class CheckpointPolicy:
    """A `PolicyFactory`: the policy of `kind` in the checkpoint at `path` (which every worker must be able to
    read) with `steps` sampling steps (None: the checkpoint's), noise seed and torch threads, checked against the
    task's scene."""

    path: str
    steps: int | None = None
    seed: int = 0
    threads: int = 1
    kind: str = "flow"

    def load(self) -> LoadedPolicy:
        """The policy, as a worker builds it (not yet checked against a scene)."""
        return load_policy(self.path, self.kind, steps=self.steps, seed=self.seed, threads=self.threads)

    def __call__(self, task: Task, envs: int) -> Policy:
        policy = self.load()
        policy.check_scene(task.scene)
        return policy
