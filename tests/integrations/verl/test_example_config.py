"""examples/verl/ composes as verl's ``main_ppo`` composes it and passes verl's own config validation.

Nothing is started: no Ray, no model. The checks are what ``verl.trainer.main_ppo.main`` runs
before ``ray.init`` (``validate_config``), plus our trainer's own start-up checks.
"""

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import os  # noqa: E402
import subprocess  # noqa: E402

EXAMPLE_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "verl")
CONFIG_NAME = "grpo_qwen05b_gsm8k_difffilter"


def compose_example(*overrides):
    """The example config as ``python -m verl.trainer.main_ppo --config-path=examples/verl --config-name=...``."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=os.path.abspath(EXAMPLE_DIR), version_base=None):
        return compose(config_name=CONFIG_NAME, overrides=list(overrides))


def validate_like_main_ppo(config):
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))


def launcher_overrides(tmp_path, env, *extra):
    """The Hydra overrides run_grpo_qwen05b_gsm8k.sh passes to verl, captured with a stub ``python``."""
    stub_dir = tmp_path / "bin"
    stub_dir.mkdir(exist_ok=True)
    stub = stub_dir / "python"
    stub.write_text('#!/usr/bin/env bash\nif [ "${1:-}" = "-m" ]; then printf "%s\\n" "$@"; else cat >/dev/null; fi\n')
    stub.chmod(0o755)
    run_env = {k: v for k, v in os.environ.items() if k not in ("N_GPUS", "NNODES", "DATA_DIR")}
    run_env.update(env, PATH=f"{stub_dir}:{os.environ['PATH']}")
    result = subprocess.run(
        ["bash", os.path.join(EXAMPLE_DIR, "run_grpo_qwen05b_gsm8k.sh"), *extra],
        capture_output=True,
        text=True,
        env=run_env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    args = result.stdout.splitlines()
    assert args[:2] == ["-m", "verl.trainer.main_ppo"] and f"--config-name={CONFIG_NAME}" in args
    return [a for a in args[2:] if not a.startswith("--config-")]


@pytest.mark.parametrize(
    "env, extra, gpus",
    [
        ({}, (), 4),  # the launcher's defaults: one node, 4 GPUs
        ({"N_GPUS": "8"}, (), 8),
        ({"N_GPUS": "8", "NNODES": "2"}, (), 16),
        ({"N_GPUS": "8"}, ("trainer.nnodes=2",), 16),
    ],
)
def test_example_passes_verl_validation(tmp_path, env, extra, gpus):
    overrides = launcher_overrides(tmp_path, {"DATA_DIR": "/shared/data/gsm8k", **env}, *extra)
    config = compose_example(*overrides)
    trainer = config.trainer
    assert isinstance(trainer.n_gpus_per_node, int) and isinstance(trainer.nnodes, int)
    assert trainer.n_gpus_per_node * trainer.nnodes == gpus
    assert config.data.train_files == "/shared/data/gsm8k/train.parquet"
    validate_like_main_ppo(config)


def test_example_config_does_not_read_the_environment():
    """verl re-resolves the config inside a Ray actor, possibly on another node: no ${oc.env:...}."""
    from omegaconf import OmegaConf

    text = OmegaConf.to_yaml(compose_example(), resolve=False)
    assert "oc.env" not in text


def test_example_dataflex_block_and_trainer_mode_are_valid():
    from verl.trainer.ppo.v1 import get_trainer_cls

    from dataflex_callbacks.integrations.verl.config import strategy_from_verl_config
    from dataflex_callbacks.integrations.verl.trainer import DataFlexPPOTrainer

    config = compose_example()
    assert get_trainer_cls(config.trainer.v1.trainer_mode) is DataFlexPPOTrainer
    strategy, _ = strategy_from_verl_config(config)
    assert strategy is not None and strategy.select is not None
