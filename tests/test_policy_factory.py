"""Policies loaded by kind: the entry points, "module:attribute", clear errors, and what an env must observe."""

from __future__ import annotations

import pickle

import pytest

from realissim.envs import EnvConfig
from realissim.policy.factory import CheckpointError, CheckpointPolicy, ObservationNeeds, load_policy, policy_loader


def test_the_flow_learner_is_registered_as_a_policy_kind() -> None:
    from realissim.learn.flow_policy import FlowPolicy

    assert policy_loader("flow") == FlowPolicy.load


def test_a_kind_may_name_its_loader_as_module_and_attribute() -> None:
    from realissim.learn.flow_policy import FlowPolicy

    assert policy_loader("realissim.learn.flow_policy:FlowPolicy.load") == FlowPolicy.load


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"'nope'.*known: \['flow'"):
        policy_loader("nope")


def test_a_missing_checkpoint_is_a_checkpoint_error_naming_the_file(tmp_path) -> None:
    with pytest.raises(CheckpointError, match=r"missing\.pt"):
        load_policy(str(tmp_path / "missing.pt"))
    with pytest.raises(CheckpointError, match=r"missing\.pt"):
        CheckpointPolicy(str(tmp_path / "missing.pt")).load()


def test_a_checkpoint_factory_pickles_for_worker_processes() -> None:
    factory = CheckpointPolicy("runs/x/last.pt", steps=4, seed=3, threads=1)
    assert pickle.loads(pickle.dumps(factory)) == factory


def test_an_env_config_observes_what_a_policy_needs() -> None:
    base = EnvConfig(replan_every=0.5, real_images=True)
    config = base.observing(ObservationNeeds(("wrist",), (64, 48), real_images=False))
    assert (config.cameras, config.image_size, config.real_images, config.replan_every) == (
        ("wrist",),
        (64, 48),
        True,  # never turned off by a policy that does not need them
        0.5,
    )
    assert EnvConfig().observing(ObservationNeeds(real_images=True)).real_images
