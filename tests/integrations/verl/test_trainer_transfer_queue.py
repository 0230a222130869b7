"""`DataFlexPPOTrainer._compute_advantage` against a real in-process TransferQueue (local Ray, CPU).

The trainer is built from verl's own composed ``ppo_trainer`` config; the trajectories are put in
TransferQueue in the layout verl's agent loop writes (nested per-response tensors keyed
``{uid}_{session}_{index}``, dataset columns as non-tensor fields). No GPU worker is started:
``_compute_advantage`` only talks to TransferQueue.
"""

import os
from types import SimpleNamespace

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from verl_batches import GROUP_SIZE, synthetic_rollouts  # noqa: E402

from dataflex_callbacks.errors import ConfigError  # noqa: E402


def verl_config(*overrides):
    import verl
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose(
            config_name="ppo_trainer",
            overrides=[
                "algorithm.adv_estimator=grpo",
                f"actor_rollout_ref.rollout.n={GROUP_SIZE}",
                "data.train_batch_size=6",
                "actor_rollout_ref.actor.ppo_mini_batch_size=6",
                "trainer.v1.trainer_mode=dataflex_sync",
                *overrides,
            ],
        )


def build_trainer(*overrides):
    from verl.trainer.ppo.v1 import get_trainer_cls

    config = verl_config(*overrides)
    return get_trainer_cls(config.trainer.v1.trainer_mode)(config)


def put_trajectories(tq, partition="train", with_padding=True, columns=None):
    """Synthetic GRPO groups in the agent loop's TransferQueue layout; returns (KVBatchMeta, padded fields).

    ``columns``: extra dataset columns ``{name: function(group index) -> value}``, stored per response
    as the agent loop stores every dataset column.
    """
    from transfer_queue import KVBatchMeta
    from verl.utils.tensordict_utils import list_of_dict_to_tensordict

    tensors, non_tensors = synthetic_rollouts(seed=3)
    lengths = tensors["lengths"].tolist()
    n = len(lengths)
    uids = [f"u{g}" for g in non_tensors["uid"]]
    rows, keys, tags = [], [], []
    for i, length in enumerate(lengths):
        response_mask = tensors["response_mask"][i, :length]
        rows.append(
            {
                "prompts": torch.ones(3, dtype=torch.int64),
                "responses": torch.ones(length, dtype=torch.int64),
                "response_mask": response_mask,
                "loss_mask": response_mask.clone(),
                "rm_scores": tensors["token_level_scores"][i, :length],
                "old_log_probs": tensors["old_log_probs"][i, :length],
                "uid": uids[i],
                "data_source": str(non_tensors["data_source"][i]),
                "index": int(non_tensors["index"][i]),
                **{name: value(int(non_tensors["index"][i])) for name, value in (columns or {}).items()},
            }
        )
        keys.append(f"{uids[i]}_{i % GROUP_SIZE}_0")
        tags.append({"status": "success", "seq_len": 3 + length, "global_steps": 1})
    if with_padding:  # verl's no-op padding row (upsample_batch_to_divisible_size)
        pad = dict(
            rows[0],
            response_mask=torch.zeros(1, dtype=torch.int64),
            loss_mask=torch.zeros(1, dtype=torch.int64),
            responses=torch.ones(1, dtype=torch.int64),
            rm_scores=torch.zeros(1),
            old_log_probs=torch.zeros(1),
            uid="padxyz",
        )
        rows.append(pad)
        keys.append("padxyz_0_0")
        tags.append({"status": "success", "seq_len": 4, "global_steps": 1, "is_padding": True})
    tq.kv_batch_put(keys=keys, partition_id=partition, fields=list_of_dict_to_tensordict(rows), tags=tags)
    return KVBatchMeta(partition_id=partition, keys=keys, tags=tags), n


def read_back(tq, meta, fields):
    data = tq.kv_batch_get(keys=meta.keys, partition_id=meta.partition_id, select_fields=fields)
    return data.to_padded_tensor()


def test_compute_advantage_writes_strategy_loss_fields(transfer_queue):
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from dataflex_callbacks import build_strategy
    from dataflex_callbacks.integrations.verl.fields import loss_fields_from_decision, rollout_batch_from_fields

    trainer = build_trainer("+dataflex.strategy=difffilter")
    trainer.global_steps = 1
    meta, n = put_trajectories(transfer_queue)
    metrics = {}
    trainer._compute_advantage(meta, metrics)
    out = read_back(
        transfer_queue,
        meta,
        [
            "advantages",
            "rollout_is_weights",
            "response_mask",
            "loss_mask",
            "rm_scores",
            "old_log_probs",
            "uid",
            "data_source",
            "index",
        ],
    )

    # Independent expectation: verl's own GRPO estimator, then our conversion, on the same rows.
    from verl import DataProto

    mask = out["response_mask"][:n]
    original_mask = synthetic_rollouts(seed=3)[0]["response_mask"]
    tensors = {
        "response_mask": original_mask,
        "token_level_scores": out["rm_scores"][:n],
        "token_level_rewards": out["rm_scores"][:n],
        "old_log_probs": out["old_log_probs"][:n],
    }
    non_tensors = {
        "uid": np.array(list(out["uid"])[:n], dtype=object),
        "data_source": np.array(list(out["data_source"])[:n], dtype=object),
        "index": np.array(list(out["index"])[:n], dtype=object),
    }
    expected = compute_advantage(
        DataProto.from_dict(tensors=tensors, non_tensors=non_tensors), adv_estimator="grpo", num_repeat=GROUP_SIZE
    )
    torch.testing.assert_close(out["advantages"][:n], expected.batch["advantages"])
    batch = rollout_batch_from_fields(dict(expected.batch.items()), expected.non_tensor_batch)
    decision = build_strategy("difffilter").apply(batch, step=1, sync=False)
    fields = loss_fields_from_decision(decision, original_mask, "token-mean")

    torch.testing.assert_close(out["rollout_is_weights"][:n], fields["rollout_is_weights"])
    assert torch.equal(mask, fields["response_mask"])
    assert torch.equal(out["loss_mask"][:n], fields["loss_mask"])
    kept = decision.keep
    assert 0 < int(kept.sum()) < n
    assert torch.all(out["rollout_is_weights"][:n][~kept] == 0) and torch.all(mask[~kept] == 0)
    # The padding row stays a no-op and is not part of the strategy's batch.
    assert torch.all(out["response_mask"][n:] == 0) and torch.all(out["rollout_is_weights"][n:] == 0)
    assert metrics["dataflex/kept_frac"] == pytest.approx(float(kept.float().mean()))
    transfer_queue.kv_clear(keys=meta.keys, partition_id=meta.partition_id)


def test_dataflex_rl_block_and_trainer_mode(transfer_queue):
    trainer = build_trainer(
        "trainer.v1.trainer_mode=dataflex_mix_sync",
        "+dataflex.mechanism=select",
        "+dataflex.scorer.name=group_solve_rate",
        "+dataflex.actuator.name=threshold_band",
        "+dataflex.actuator.params.low=0.2",
        "+dataflex.actuator.params.high=0.8",
    )
    assert trainer.trainer_mode == "sync" and trainer.registered_name == "dataflex_mix_sync"
    trainer.global_steps = 1
    meta, n = put_trajectories(transfer_queue, with_padding=False)
    metrics = {}
    trainer._compute_advantage(meta, metrics)
    assert 0 < metrics["dataflex/kept_frac"] < 1
    transfer_queue.kv_clear(keys=meta.keys, partition_id=meta.partition_id)


def test_bad_dataflex_key_is_named_at_trainer_start():
    with pytest.raises(ConfigError, match="selectt"):
        build_trainer("+dataflex.selectt.scorer=reward")
    with pytest.raises(ConfigError, match="dataflex.enable"):
        build_trainer("+dataflex.enable=maybe", "+dataflex.strategy=difffilter")


def test_domains_are_read_from_the_domain_key_column(transfer_queue):
    """DataFlex-RL's layout: data_source routes the reward, the `domain` column names the mix domain."""
    trainer = build_trainer(
        "+dataflex.mechanism=mix",
        "+dataflex.domains=[gsm8k_short,gsm8k_long]",
        "+dataflex.domain_key=domain",
        "+dataflex.actuator.name=reward_gap",
        "+dataflex.warmup_step=0",
        "+dataflex.update_step=1",
    )
    assert trainer._domain_key() == "domain"
    trainer.global_steps = 1
    meta, n = put_trajectories(
        transfer_queue,
        with_padding=False,
        columns={
            "data_source": lambda group: "openai/gsm8k",
            "domain": lambda group: ("gsm8k_short", "gsm8k_long")[group % 2],
        },
    )
    trainer._compute_advantage(meta, {})
    samples = trainer.strategy.mixing.tracker.as_dict()["samples"]
    groups = n // GROUP_SIZE
    assert samples == {"gsm8k_short": GROUP_SIZE * ((groups + 1) // 2), "gsm8k_long": GROUP_SIZE * (groups // 2)}
    transfer_queue.kv_clear(keys=meta.keys, partition_id=meta.partition_id)


def test_fit_prints_the_strategy_its_parts_and_the_domains_first(transfer_queue, monkeypatch, capsys):
    from datasets import Dataset
    from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync

    trainer = build_trainer("+dataflex.strategy=greso")
    monkeypatch.setattr(PPOTrainerSync, "fit", lambda self, *args, **kwargs: "verl's loop")
    # verl's RLHFDataset keeps its rows in a `dataframe`; the domains are its data_source values.
    monkeypatch.setattr(
        trainer,
        "train_dataset",
        SimpleNamespace(dataframe=Dataset.from_dict({"data_source": ["gsm8k", "math", "gsm8k"]})),
        raising=False,
    )
    assert trainer.fit(None) == "verl's loop"
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("dataflex: strategy")]
    assert len(lines) == 1 and lines[0].startswith(
        "dataflex: strategy 'greso': pre_select skip_zero_variance (warming up"
    ), lines
    assert lines[0].endswith("domains (column 'data_source'): gsm8k, math")
