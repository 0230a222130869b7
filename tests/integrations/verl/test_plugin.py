"""``import verl`` alone registers the DataFlex trainers through the installed entry point."""

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import importlib.metadata  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

PROBE = """
import sys
import verl
assert "dataflex_callbacks.integrations.verl.trainer" not in sys.modules  # deferred: import verl stays cheap
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
print(",".join(sorted(TRAINER_REGISTRY)))
"""


def run_probe(**env):
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        # A hang catcher, not a speed test: room for importing verl on a 2-core machine at load 10.
        timeout=600,
        env={**os.environ, "VERL_LOGGING_LEVEL": "WARNING", **env},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return set(result.stdout.strip().splitlines()[-1].split(","))


def test_entry_point_is_installed():
    points = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="verl.plugins")}
    assert points.get("dataflex") == "dataflex_callbacks.integrations.verl.plugin:register"


def test_import_verl_registers_dataflex_trainers():
    names = run_probe(VERL_USE_EXTERNAL_PLUGINS="auto")
    assert {"dataflex_sync", "dataflex_mix_sync", "dataflex_colocate_async", "dataflex_separate_async", "sync"} <= names


def test_verl_use_external_plugins_is_respected():
    assert "dataflex_sync" not in run_probe(VERL_USE_EXTERNAL_PLUGINS="none")
    assert "dataflex_sync" in run_probe(VERL_USE_EXTERNAL_PLUGINS="dataflex")


def test_registration_failure_is_logged_at_warning(monkeypatch, caplog):
    from dataflex_callbacks.integrations.verl import plugin

    def broken():
        raise ImportError("simulated missing dependency")

    monkeypatch.setattr(plugin, "register_trainers", broken)
    with caplog.at_level(logging.WARNING, logger="dataflex_callbacks.integrations.verl"):
        assert plugin._register_logged() is False
    record = next(r for r in caplog.records if "could not register" in r.getMessage())
    assert record.levelno == logging.WARNING and "simulated missing dependency" in caplog.text


def test_registration_is_idempotent():
    from verl.trainer.ppo.v1 import get_trainer_cls

    from dataflex_callbacks.integrations.verl.plugin import register_trainers
    from dataflex_callbacks.integrations.verl.trainer import DataFlexPPOTrainer

    register_trainers()
    register_trainers()
    assert get_trainer_cls("dataflex_sync") is DataFlexPPOTrainer is get_trainer_cls("dataflex_mix_sync")


def test_each_async_mode_is_verls_trainer_of_that_mode_with_the_strategy_steps():
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
    from verl.trainer.ppo.v1.trainer_separate_async import PPOTrainerSeparateAsync

    from dataflex_callbacks.integrations.verl.plugin import register_trainers
    from dataflex_callbacks.integrations.verl.trainer import DataFlexSteps

    register_trainers()
    for name, verl_cls, mode in (
        ("dataflex_colocate_async", PPOTrainerColocateAsync, "colocate_async"),
        ("dataflex_separate_async", PPOTrainerSeparateAsync, "separate_async"),
    ):
        cls = get_trainer_cls(name)
        assert issubclass(cls, DataFlexSteps) and issubclass(cls, verl_cls) and cls.BASE_MODE == mode
        # verl branches on trainer_mode (replay buffer, TransferQueue prompt persistence): it must read verl's mode.
        assert cls.__mro__.index(DataFlexSteps) < cls.__mro__.index(verl_cls)


def test_policy_versions_are_verls_max_global_steps_tags_of_the_real_rows():
    import numpy as np
    import torch

    from dataflex_callbacks.integrations.verl.trainer import policy_versions

    tags = [{"max_global_steps": 3}, {"max_global_steps": 4, "is_padding": True}, {"max_global_steps": 2}]
    real = np.array([True, False, True])
    assert torch.equal(policy_versions(tags, real), torch.tensor([3, 2]))
    assert policy_versions([{"global_steps": 1}], np.array([True])) is None  # a row without the tag: no versions
