"""2-process DDP runs (gloo, CPU): both ranks take the same decisions, equal to one process deciding on the whole
step, on different prompts, and log the per-domain statistics of all ranks' rows; a DataLoader that would give
every rank the same prompts is refused."""

import json
import os
import subprocess
import sys

import pytest
import torch
from lightning_loss_reference import reduced_batch, reference_loss
from lightning_toy import STRATEGY, toy_rows

from dataflex_callbacks import RolloutBatch, build_strategy

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))


def pad(rows, width, value=0):
    return [list(row) + [value] * (width - len(row)) for row in rows]


def launch(out, mode):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("MASTER_PORT", None)
    return subprocess.run(
        [sys.executable, os.path.join(HERE, "lightning_ddp_run.py"), str(out), mode],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def run_ranks(out, mode):
    done = launch(out, mode)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.load(open(out / f"rank{r}.json")) for r in range(2)]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return run_ranks(tmp_path_factory.mktemp("ddp"), "mix")


def test_the_sampler_needs_no_trainer_flag_and_skipping_agrees_across_ranks(ranks):
    # The Trainer keeps its default use_distributed_sampler: Lightning leaves the DataFlex sampler as it is.
    assert ranks[0]["sampler_type"] == ranks[1]["sampler_type"] == "ShardedSampler"
    assert ranks[0]["history_keys"] == ranks[1]["history_keys"] and ranks[0]["history_keys"]
    assert ranks[0]["streaks"] == ranks[1]["streaks"]
    # completion_ids are gathered too: identical answers scored differently show up as reward noise.
    assert ranks[0]["domain_noise"] == ranks[1]["domain_noise"] and max(ranks[0]["domain_noise"].values()) > 0
    issued = {row["prompt_key"] for row in toy_rows(24)}
    assert set(ranks[0]["history_keys"]) <= issued, "the history is keyed by the sampler's keys"


def test_a_plain_dataloader_trains_different_prompts_on_each_rank(tmp_path):
    zero, one = (rank["records"] for rank in run_ranks(tmp_path, "plain"))
    assert len(zero) == len(one) == 4
    for a, b in zip(zero, one, strict=True):
        assert not set(a["rows"]) & set(b["rows"]), f"both ranks trained on prompts {set(a['rows']) & set(b['rows'])}"


def test_a_plain_dataloader_without_lightnings_distributed_sampler_is_refused(tmp_path):
    done = launch(tmp_path, "unsafe")
    assert done.returncode != 0
    assert "would train on the same prompts" in done.stderr and "use_distributed_sampler=False" in done.stderr
    assert not list(tmp_path.glob("rank*.json")), "refused before training"


def test_the_tracker_counts_every_response_once(ranks):
    responses = sum(len(record["rewards"]) for rank in ranks for record in rank["records"])
    for rank in ranks:
        assert sum(rank["samples_tracked"]) == responses, (
            "gathered batch fed once, not once per rank or all-reduced again"
        )


def test_both_ranks_decide_alike_on_disjoint_rows(ranks):
    zero, one = (rank["records"] for rank in ranks)
    assert len(zero) == len(one) == 4
    for a, b in zip(zero, one, strict=True):
        assert a["step"] == b["step"]
        assert not set(a["rows"]) & set(b["rows"]), "the shard layout gives ranks different prompts"
        assert a["target"] == b["target"], "mixing targets are identical on every rank"
        assert len(a["mask"][0]) != len(b["mask"][0]), "the ranks' completion lengths differ (padding is exercised)"
    kept = [sum(a["keep"] + b["keep"]) for a, b in zip(zero, one, strict=True)]
    assert any(0 < k < 2 * len(zero[0]["keep"]) for k in kept), "some step drops part of the global batch"


def test_decisions_equal_one_process_deciding_on_the_gathered_step(ranks):
    strategy = build_strategy({key: STRATEGY[key] for key in ("select", "reweight")})
    for a, b in zip(*(rank["records"] for rank in ranks), strict=True):
        width = max(len(a["mask"][0]), len(b["mask"][0]))
        n_groups = max(a["group_ids"]) + 1
        batch = RolloutBatch(
            torch.tensor(a["rewards"] + b["rewards"]),
            group_ids=torch.tensor(a["group_ids"] + [g + n_groups for g in b["group_ids"]]),
            completion_mask=torch.tensor(pad(a["mask"], width, False) + pad(b["mask"], width, False)),
            advantages=torch.tensor(a["advantages"] + b["advantages"]),
        )
        decision = strategy.apply(batch, step=a["step"])
        assert decision.keep.tolist() == a["keep"] + b["keep"]
        torch.testing.assert_close(decision.weights, torch.tensor(a["weights"] + b["weights"]))

        # DDP averages the ranks' losses (and gradients): that average is the loss of the reduced global batch.
        per_token_loss = torch.tensor(
            pad(a["per_token_loss"], width) + pad(b["per_token_loss"], width), dtype=torch.float64
        )
        loss, mask, weights = reduced_batch(per_token_loss, batch.valid_mask, decision.keep, decision.weights.double())
        want = float(reference_loss(loss, mask, weights, "sequence_mean"))
        assert (a["loss"] + b["loss"]) / 2 == pytest.approx(want, rel=1e-5, abs=1e-7)


def test_logged_domain_statistics_are_those_of_all_ranks_rows(ranks):
    """Each rank adds its own rows; the sum-reduction in compute() makes both log the statistics of the whole step."""
    zero, one = (rank["records"] for rank in ranks)
    logged = [rank["logged"] for rank in ranks]
    assert len(logged[0]) == len(logged[1]) == len(zero)
    local_differs = False
    for index, (a, b) in enumerate(zip(zero, one, strict=True)):
        for domain in sorted(set(a["domains"] + b["domains"])):
            rows = [
                (r, k)
                for record in (a, b)
                for r, k, d in zip(record["rewards"], record["keep"], record["domains"], strict=True)
                if d == domain
            ]
            expected = {
                "selection_reward": sum(r for r, _ in rows) / len(rows),
                "solve_rate": sum(r > 0.5 for r, _ in rows) / len(rows),
                "kept_frac": sum(k for _, k in rows) / len(rows),
                "responses": len(rows),
            }
            for rank in range(2):
                for name, value in expected.items():
                    got = logged[rank][index][f"dataflex/{name}/{domain}_step"]
                    assert got == pytest.approx(value, rel=1e-6), (rank, index, name, domain)
            mine = [r for r, d in zip(a["rewards"], a["domains"], strict=True) if d == domain]
            local_differs |= not mine or sum(mine) / len(mine) != pytest.approx(expected["selection_reward"], rel=1e-6)
    assert local_differs, "the case must tell rank 0's own rows from the whole step"
