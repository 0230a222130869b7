"""Everything the adapter writes into a verl checkpoint loads with ``torch.load(weights_only=True)``.

verl itself loads ``data.pt`` with ``weights_only=False``; a checkpoint that only holds plain
containers, tensors and numbers also survives safe loading (a shared checkpoint, a future verl
default). Checked for one preset of each family, after the strategy has state worth saving.
"""

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import os  # noqa: E402

import torch  # noqa: E402
from test_prompt_feed import DOMAINS, _same, fetch_indices, make_trainer, write_parquet  # noqa: E402

from dataflex_callbacks import RolloutBatch  # noqa: E402

FAMILIES = {"selection": "difffilter", "reweighting": "softmax", "mixing": "reward_gap", "skip": "skip"}


def observed_batch(step: int, groups: int = 4, group_size: int = 3) -> RolloutBatch:
    """Rollouts of prompts 0..groups-1 (verl's ``index``), mixed rewards, every domain present."""
    gen = torch.Generator().manual_seed(step)
    n = groups * group_size
    rewards = (torch.rand(n, generator=gen) < 0.5).float()
    rewards[::group_size] = 1.0  # a zero-variance group now and then for `skip`
    mask = torch.ones(n, 5, dtype=torch.bool)
    domains = list(DOMAINS)
    return RolloutBatch(
        rewards=rewards,
        group_ids=torch.arange(groups).repeat_interleave(group_size),
        completion_mask=mask,
        advantages=(rewards - rewards.mean()).unsqueeze(1).expand(n, 5).clone(),
        logprobs=-torch.rand(n, 5, generator=gen),
        domains=[domains[(i // group_size) % len(domains)] for i in range(n)],
        prompt_keys=[i // group_size for i in range(n)],
    )


@pytest.mark.parametrize("family", list(FAMILIES))
def test_checkpoint_loads_safely_and_resumes(tmp_path, family):
    data_file = write_parquet(tmp_path / "train.parquet")
    checkpoint_dir = tmp_path / "ckpt"
    preset = FAMILIES[family]
    trainer = make_trainer(data_file, checkpoint_dir, f"+dataflex.strategy={preset}")
    fetch_indices(trainer, 2)
    for step in range(1, 13):
        trainer.strategy.apply(observed_batch(step), step=step, sync=False)
    fetch_indices(trainer, 2)
    trainer.global_steps = 4
    trainer._save_checkpoint()
    folder = checkpoint_dir / "global_step_4"

    data_state = torch.load(folder / "data.pt", weights_only=True)
    dataflex_state = torch.load(folder / "dataflex.pt", weights_only=True)
    assert _same(dataflex_state["strategy"], trainer.strategy.state_dict())
    if family == "mixing":  # the mixing sampler's own state rides in verl's data.pt
        assert trainer.prompt_sampler is not None and data_state

    resumed = make_trainer(data_file, checkpoint_dir, f"+dataflex.strategy={preset}")
    resumed._load_checkpoint()
    assert resumed.global_steps == 4
    assert _same(resumed.strategy.state_dict(), trainer.strategy.state_dict())
    assert resumed._prompt_rng.bit_generator.state == trainer._prompt_rng.bit_generator.state
    assert fetch_indices(resumed, 2) == fetch_indices(trainer, 2)
    assert os.path.exists(folder / "dataflex.pt")
