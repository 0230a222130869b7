"""StepMetrics and the per-domain row statistics: plain-loop references, and what a real run logs."""

import csv
import math
import random

import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from lightning_toy import STRATEGY, ToyGRPO, toy_rows, toy_trainer

from dataflex_callbacks.integrations.lightning import DataFlexCallback
from dataflex_callbacks.integrations.lightning.step_metrics import StepMetrics, cover_domains, domain_log_groups
from dataflex_callbacks.metrics import DomainRewardStats

DOMAINS = ["easy", "mid", "hard", "rare"]


def micro_batch(rng):
    """One micro-batch's strategy metrics and its responses: statistics (some NaN), domain rewards, state."""
    metrics = {
        "kept_frac": rng.random(),
        "ess": float("nan") if rng.random() < 0.2 else rng.random(),
        "pre_select/noisy_share": rng.random(),
        "mix/target/easy": rng.random(),
        "pre_select/skipped_prompts": float(rng.randint(0, 9)),
    }
    for domain in DOMAINS:
        if rng.random() < 0.7:
            metrics[f"selection_reward/{domain}"] = rng.random()
    return metrics, rng.randint(0, 40)


def reference_step(batches):
    """The step's values with Python loops: responses-weighted means (NaN left out), state from the last batch;
    domain rewards are left to the row statistics."""
    expected = {}
    names = dict.fromkeys(
        name for metrics, _ in batches for name in metrics if not name.startswith("selection_reward/")
    )
    for name in names:
        if name.startswith("mix/") or name == "pre_select/skipped_prompts":
            expected[name] = [m[name] for m, _ in batches if name in m][-1]
            continue
        pairs = [(m[name], max(r, 1)) for m, r in batches if name in m and not math.isnan(m[name])]
        expected[name] = sum(v * w for v, w in pairs) / sum(w for _, w in pairs) if pairs else float("nan")
    return expected, sum(r for _, r in batches)


@pytest.mark.parametrize("seed", range(5))
def test_a_step_is_the_responses_weighted_mean_of_its_micro_batches(seed):
    rng = random.Random(seed)
    step = StepMetrics()
    assert not step.pending
    for _ in range(3):  # three optimizer steps through one object
        batches = [micro_batch(rng) for _ in range(rng.randint(1, 4))]
        for metrics, responses in batches:
            step.update(metrics, responses)
        assert step.pending
        values, responses = step.flush()
        expected, expected_responses = reference_step(batches)
        assert responses == expected_responses and set(values) == set(expected)
        for name, value in expected.items():
            if math.isnan(value):
                assert math.isnan(values[name]), name
            else:  # accumulated in float32 (MeanMetric)
                assert values[name] == pytest.approx(value, rel=1e-6), name
        assert not step.pending


def test_micro_batch_domain_means_are_not_step_metrics():
    step = StepMetrics()
    step.update({"selection_reward/easy": 1.0}, 4)
    assert not step.pending, "selection_reward/<domain> of a step comes from its rows, not from micro-batch means"
    step.update({"selection_reward/easy": 0.0, "kept_frac": 0.5}, 12)
    assert step.flush() == ({"kept_frac": 0.5}, 16)


def test_covering_new_domains_keeps_the_sums_and_the_order():
    first = cover_domains(None, ["mid", "easy", "mid"])
    assert first.domains == ["mid", "easy"]
    first.update(torch.tensor([1.0, 0.0, 1.0]), ["mid", "easy", "mid"], keep=torch.tensor([True, False, False]))
    assert cover_domains(first, ["easy"]) is first
    grown = cover_domains(first, ["hard", "easy", "rare"])
    assert grown.domains == ["mid", "easy", "hard", "rare"]
    grown.update(torch.tensor([0.25, 1.0]), ["hard", "mid"])

    reference = DomainRewardStats(["mid", "easy", "hard", "rare"])
    reference.update(
        torch.tensor([1.0, 0.0, 1.0, 0.25, 1.0]),
        ["mid", "easy", "mid", "hard", "mid"],
        keep=torch.tensor([True, False, False, True, True]),
    )
    assert grown.compute() == reference.compute()
    grown.reset()
    assert grown.compute()["responses/mid"] == 0.0 and "selection_reward/mid" not in grown.compute()


def test_domain_shares_are_weighed_by_the_domains_responses_and_counts_summed():
    stats = DomainRewardStats(["a", "b"])
    stats.update(torch.tensor([1.0, 0.0, 0.0, float("nan")]), ["a", "a", "a", "b"])
    groups = domain_log_groups(stats.compute(), stats.domains)
    assert groups == [
        (
            {"selection_reward/a": pytest.approx(1 / 3), "solve_rate/a": pytest.approx(1 / 3), "kept_frac/a": 1.0},
            3,
            "mean",
        ),
        ({"responses/a": 3.0, "nonfinite_rewards/a": 0.0}, 1, "sum"),
        ({"responses/b": 0.0, "nonfinite_rewards/b": 1.0}, 1, "sum"),
    ]


def logged(tmp_path, name):
    with open(tmp_path / "lightning_logs" / "version_0" / "metrics.csv") as handle:
        return [float(row[name]) for row in csv.DictReader(handle) if row.get(name)]


def domain_values(records, domain):
    """A domain's statistics over ``records``, from its rows with Python loops (rewards here are 0 or 1)."""
    rows = [
        (reward, keep)
        for record in records
        for reward, keep, label in zip(record["rewards"], record["keep"], record["domains"], strict=True)
        if label == domain
    ]
    if not rows:
        return None
    return {
        "selection_reward": sum(r for r, _ in rows) / len(rows),
        "solve_rate": sum(r > 0.5 for r, _ in rows) / len(rows),
        "kept_frac": sum(k for _, k in rows) / len(rows),
        "responses": float(len(rows)),
    }


@pytest.mark.slow
def test_logged_domain_statistics_are_those_of_the_step_rows(tmp_path):
    module = ToyGRPO(toy_rows())
    trainer = toy_trainer(
        [DataFlexCallback({"select": STRATEGY["select"]})],
        max_steps=3,
        logger=CSVLogger(tmp_path),
        log_every_n_steps=1,
        default_root_dir=str(tmp_path),
        accumulate_grad_batches=2,
    )
    trainer.fit(module)
    assert len(module.records) == 6
    present = [{d for d in ("easy", "mid", "hard") if d in r["domains"]} for r in module.records]
    assert any(len(p) < 3 for p in present), "the case must have micro-batches without some domain"
    differs = False
    for domain in ("easy", "mid", "hard"):
        steps = [domain_values(module.records[2 * step : 2 * step + 2], domain) for step in range(3)]
        epoch = domain_values(module.records, domain)
        for name in ("selection_reward", "solve_rate", "kept_frac"):
            expected = [values[name] for values in steps if values is not None]
            assert logged(tmp_path, f"dataflex/{name}/{domain}_step") == pytest.approx(expected, rel=1e-6), name
            # The epoch value is the share over all the epoch's rows of the domain.
            assert logged(tmp_path, f"dataflex/{name}/{domain}_epoch") == pytest.approx([epoch[name]], rel=1e-6), name
        assert logged(tmp_path, f"dataflex/responses/{domain}_step") == [v["responses"] if v else 0.0 for v in steps]
        assert logged(tmp_path, f"dataflex/responses/{domain}_epoch") == [epoch["responses"]]
        assert logged(tmp_path, f"dataflex/nonfinite_rewards/{domain}_step") == [0.0] * 3

        # The old approximation (each micro-batch's domain mean weighed by all its responses) differs somewhere.
        for step, values in enumerate(steps):
            pairs = [(len(r["rewards"]), domain_values([r], domain)) for r in module.records[2 * step : 2 * step + 2]]
            pairs = [(w, v["selection_reward"]) for w, v in pairs if v is not None]
            if values is not None:
                old = sum(w * v for w, v in pairs) / sum(w for w, _ in pairs)
                differs |= abs(old - values["selection_reward"]) > 1e-6
    assert differs, "the case must tell the rows' mean from the micro-batch approximation"
