"""Our loss fields through verl's own GRPO advantage, policy loss and worker-side ppo_loss.

For every loss_agg_mode verl offers: dropped responses get exactly zero gradient, and loss and
gradient equal those of the batch with the dropped responses physically removed (one PPO
mini-batch, as in verl's engine: the token count comes from loss_mask, the sequence count is the
trainer's fixed global_batch_size).
"""

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl import DataProto  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers.config import FSDPActorConfig  # noqa: E402
from verl.workers.utils.losses import ppo_loss  # noqa: E402
from verl_batches import synthetic_rollouts  # noqa: E402

from dataflex_callbacks import build_strategy  # noqa: E402
from dataflex_callbacks.integrations.verl.fields import (  # noqa: E402
    LOSS_AGG_MODES,
    SEQUENCE_MEAN_MODES,
    loss_fields_from_decision,
    rollout_batch_from_fields,
)

STRATEGIES = {
    "difffilter": "difffilter",
    "topk+softmax": {
        "select": {"scorer": "advantage_magnitude", "selector": {"name": "topk_fraction", "fraction": 0.5}},
        "reweight": {"scorer": "advantage_magnitude", "reweighter": {"name": "softmax", "temperature": 1.0}},
    },
    "entropy_top_tokens": {
        "select": {"scorer": "token_entropy", "selector": {"name": "entropy_top_tokens", "fraction": 0.3}}
    },
}


def grpo_dataproto(seed=0):
    tensors, non_tensors = synthetic_rollouts(seed)
    tensors.pop("lengths")
    data = DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)
    data = compute_advantage(data, adv_estimator="grpo", num_repeat=5, norm_adv_by_std_in_grpo=True)
    gen = torch.Generator().manual_seed(seed + 1)
    data.batch["entropy"] = torch.rand(data.batch["response_mask"].shape, generator=gen)
    return data


def decide(data, strategy_spec):
    batch = rollout_batch_from_fields(dict(data.batch.items()), data.non_tensor_batch)
    return build_strategy(strategy_spec).apply(batch, step=0, sync=False)


def actor_config(mode, use_kl_loss=False):
    config = FSDPActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=2,
        ppo_mini_batch_size=4,
        use_dynamic_bsz=False,
        rollout_n=1,
        loss_agg_mode=mode,
        use_kl_loss=use_kl_loss,
        kl_loss_coef=0.1,
        entropy_coeff=0.0,
    )
    return config


def policy_loss(mode, log_prob, data, mask, weights, batch_num_tokens, global_batch_size):
    config = actor_config(mode)
    config.global_batch_info.update(
        dp_size=1, batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size, loss_scale_factor=None
    )
    loss, _ = get_policy_loss_fn("vanilla")(
        old_log_prob=data.batch["old_log_probs"],
        log_prob=log_prob,
        advantages=data.batch["advantages"],
        response_mask=mask.bool(),
        loss_agg_mode=mode,
        config=config,
        rollout_is_weights=weights,
    )
    return loss


def reference_weights(decision, data, kept_rows):
    """What the reduced batch trains with: the decision's weights on kept rows (1 where absent)."""
    weights = decision.weights
    if weights.dim() == 1:
        weights = weights.unsqueeze(1).expand_as(data.batch["response_mask"])
    return weights[kept_rows].float()


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
@pytest.mark.parametrize("name", list(STRATEGIES))
def test_policy_loss_equals_physically_reduced_batch(mode, name):
    data = grpo_dataproto()
    decision = decide(data, STRATEGIES[name])
    mask = data.batch["response_mask"]
    fields = loss_fields_from_decision(decision, mask, mode)
    n = mask.shape[0]

    log_prob = (data.batch["old_log_probs"] + 0.05 * torch.randn(mask.shape)).requires_grad_(True)
    loss = policy_loss(
        mode,
        log_prob,
        data,
        fields["response_mask"],
        fields["rollout_is_weights"],
        batch_num_tokens=fields["loss_mask"].sum(),
        global_batch_size=n,
    )
    loss.backward()

    kept_rows = fields["response_mask"].bool().any(dim=1)
    assert 0 < int(kept_rows.sum()) < n
    assert torch.equal(log_prob.grad[~kept_rows], torch.zeros_like(log_prob.grad[~kept_rows]))
    dropped_tokens = mask.bool() & ~fields["response_mask"].bool()
    assert torch.all(log_prob.grad[dropped_tokens] == 0)

    reduced = data.select_idxs(kept_rows)
    reduced_mask = fields["response_mask"][kept_rows]  # token-level drops are removed tokens
    reduced_log_prob = log_prob.detach()[kept_rows].clone().requires_grad_(True)
    weights = reference_weights(decision, data, kept_rows)
    reference = policy_loss(
        mode,
        reduced_log_prob,
        reduced,
        reduced_mask,
        weights,
        batch_num_tokens=reduced_mask.sum(),
        global_batch_size=int(kept_rows.sum()),
    )
    reference.backward()
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(log_prob.grad[kept_rows], reduced_log_prob.grad, rtol=1e-5, atol=1e-8)


def test_existing_rollout_weights_are_multiplied():
    data = grpo_dataproto()
    decision = decide(data, "difffilter")
    mask = data.batch["response_mask"]
    existing = torch.rand(mask.shape) + 0.5
    plain = loss_fields_from_decision(decision, mask, "token-mean")["rollout_is_weights"]
    combined = loss_fields_from_decision(decision, mask, "token-mean", existing_weights=existing)["rollout_is_weights"]
    torch.testing.assert_close(combined, plain * existing)


def test_dropping_everything_gives_zero_loss_not_nan():
    data = grpo_dataproto()
    spec = {"select": {"scorer": "group_solve_rate", "selector": {"name": "threshold_band", "low": 0.99, "high": 1.0}}}
    decision = decide(data, spec)
    assert not decision.keep.any()
    mask = data.batch["response_mask"]
    fields = loss_fields_from_decision(decision, mask, "token-mean")
    assert torch.equal(fields["loss_mask"], mask)  # a zero token count would make verl's loss NaN
    log_prob = data.batch["old_log_probs"].clone().requires_grad_(True)
    loss = policy_loss(
        "token-mean",
        log_prob,
        data,
        fields["response_mask"],
        fields["rollout_is_weights"],
        batch_num_tokens=fields["loss_mask"].sum(),
        global_batch_size=mask.shape[0],
    )
    loss.backward()
    assert float(loss) == 0.0 and torch.all(log_prob.grad == 0)


# ---------------------------------------------------------------- worker-side ppo_loss


def nested_rows(padded, lengths):
    return torch.nested.as_nested_tensor(
        [padded[i, : int(lengths[i])] for i in range(len(lengths))], layout=torch.jagged
    )


def worker_inputs(data, fields, rows, prompt_len=3):
    """The TensorDict the v1 actor's loss function sees (nested, as TransferQueue stores it)."""
    mask = data.batch["response_mask"][rows]
    lengths = mask.sum(dim=1)
    n = int(rows.sum())
    ref = data.batch["old_log_probs"][rows] - 0.1
    td = TensorDict(
        {
            "prompts": torch.nested.as_nested_tensor(
                [torch.ones(prompt_len, dtype=torch.int64)] * n, layout=torch.jagged
            ),
            "responses": nested_rows(torch.ones_like(mask), lengths),
            "response_mask": nested_rows(fields["response_mask"][rows], lengths),
            "loss_mask": nested_rows(fields["loss_mask"][rows], lengths),
            "old_log_probs": nested_rows(data.batch["old_log_probs"][rows], lengths),
            "advantages": nested_rows(data.batch["advantages"][rows], lengths),
            "rollout_is_weights": nested_rows(fields["rollout_is_weights"][rows], lengths),
            "ref_log_prob": nested_rows(ref, lengths),
        },
        batch_size=n,
    )
    return td, lengths


def run_ppo_loss(mode, data, fields, rows, log_prob_padded, use_kl_loss, global_batch_size):
    td, lengths = worker_inputs(data, fields, rows)
    prompt_len = 3
    # The model's flat per-token log-probs over prompt+response; ppo_loss slices the responses.
    flat = []
    for i, length in enumerate(lengths.tolist()):
        flat.append(torch.zeros(prompt_len - 1))
        flat.append(log_prob_padded[i, :length])
        flat.append(torch.zeros(1))
    values = torch.cat(flat)
    batch_num_tokens = int(td["loss_mask"].values().sum())  # what the FSDP engine all-reduces
    tu.assign_non_tensor(td, dp_size=1, batch_num_tokens=batch_num_tokens, global_batch_size=global_batch_size)
    loss, metrics = ppo_loss(actor_config(mode, use_kl_loss), {"log_probs": values}, td)
    return loss


@pytest.mark.parametrize("use_kl_loss", [False, True], ids=["no_kl", "kl_loss"])
@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_worker_ppo_loss_equals_physically_reduced_batch(mode, use_kl_loss):
    data = grpo_dataproto()
    decision = decide(data, "difffilter")
    mask = data.batch["response_mask"]
    n = mask.shape[0]
    fields = loss_fields_from_decision(decision, mask, mode)
    kept = fields["response_mask"].bool().any(dim=1)
    every = torch.ones(n, dtype=torch.bool)

    log_prob = (data.batch["old_log_probs"] + 0.05 * torch.randn(mask.shape)).requires_grad_(True)
    loss = run_ppo_loss(mode, data, fields, every, log_prob, use_kl_loss, global_batch_size=n)
    loss.backward()
    assert torch.all(log_prob.grad[~kept] == 0), "dropped responses must get exactly zero gradient"

    untouched = {"response_mask": mask, "loss_mask": mask, "rollout_is_weights": torch.ones(mask.shape)}
    reduced_log_prob = log_prob.detach()[kept].clone().requires_grad_(True)
    reference = run_ppo_loss(
        mode, data, untouched, kept, reduced_log_prob, use_kl_loss, global_batch_size=int(kept.sum())
    )
    reference.backward()
    if use_kl_loss and mode in SEQUENCE_MEAN_MODES:
        # Pinned deviation: verl divides the (unweighted) KL term of seq-mean modes by the trainer's
        # fixed sequence count, so it is kept/rows of the reduced batch's KL term.
        assert not torch.allclose(loss, reference)
        return
    torch.testing.assert_close(loss, reference, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(log_prob.grad[kept], reduced_log_prob.grad, rtol=1e-5, atol=1e-8)
