"""A 2-process DDP run (gloo, CPU): both ranks take the same decisions, equal to one process deciding on the whole step."""

import json
import os
import subprocess
import sys

import pytest
import torch

from dataflex_callbacks import RolloutBatch, build_strategy
from lightning_toy import STRATEGY
from lightning_loss_reference import reduced_batch, reference_loss

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))


def pad(rows, width, value=0):
    return [list(row) + [value] * (width - len(row)) for row in rows]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    env.pop("MASTER_PORT", None)
    done = subprocess.run([sys.executable, os.path.join(HERE, "lightning_ddp_run.py"), str(out)], cwd=HERE, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.load(open(out / f"rank{r}.json")) for r in range(2)]


def test_the_tracker_counts_every_response_once(ranks):
    responses = sum(len(record["rewards"]) for rank in ranks for record in rank["records"])
    for rank in ranks:
        assert sum(rank["samples_tracked"]) == responses, "gathered batch fed once, not once per rank or all-reduced again"


def test_both_ranks_decide_alike_on_disjoint_rows(ranks):
    zero, one = (rank["records"] for rank in ranks)
    assert len(zero) == len(one) == 4
    for a, b in zip(zero, one):
        assert a["step"] == b["step"]
        assert not set(a["rows"]) & set(b["rows"]), "the shard layout gives ranks different prompts"
        assert a["target"] == b["target"], "mixing targets are identical on every rank"
        assert len(a["mask"][0]) != len(b["mask"][0]), "the ranks' completion lengths differ (padding is exercised)"
    kept = [sum(a["keep"] + b["keep"]) for a, b in zip(zero, one)]
    assert any(0 < k < 2 * len(zero[0]["keep"]) for k in kept), "some step drops part of the global batch"


def test_decisions_equal_one_process_deciding_on_the_gathered_step(ranks):
    strategy = build_strategy({key: STRATEGY[key] for key in ("select", "reweight")})
    for a, b in zip(*(rank["records"] for rank in ranks)):
        width = max(len(a["mask"][0]), len(b["mask"][0]))
        n_groups = max(a["group_ids"]) + 1
        batch = RolloutBatch(
            torch.tensor(a["rewards"] + b["rewards"]),
            group_ids=torch.tensor(a["group_ids"] + [g + n_groups for g in b["group_ids"]]),
            completion_mask=torch.tensor(pad(a["mask"], width, False) + pad(b["mask"], width, False)),
            advantages=torch.tensor(a["advantages"] + b["advantages"]))
        decision = strategy.apply(batch, step=a["step"])
        assert decision.keep.tolist() == a["keep"] + b["keep"]
        torch.testing.assert_close(decision.weights, torch.tensor(a["weights"] + b["weights"]))

        # DDP averages the ranks' losses (and gradients): that average is the loss of the reduced global batch.
        per_token_loss = torch.tensor(pad(a["per_token_loss"], width) + pad(b["per_token_loss"], width), dtype=torch.float64)
        loss, mask, weights = reduced_batch(per_token_loss, batch.valid_mask, decision.keep, decision.weights.double())
        want = float(reference_loss(loss, mask, weights, "sequence_mean"))
        assert (a["loss"] + b["loss"]) / 2 == pytest.approx(want, rel=1e-5, abs=1e-7)
