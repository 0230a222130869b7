"""The policy versions the asynchronous adapter reads as samples leave TRL's rollout queue: a version that is not
an int from 0 to 2**63 - 1 is refused as a `BatchError` naming who set it, before it reaches a `RolloutBatch`.

The real AsyncGRPOTrainer on a CPU with the in-process worker (test_async_grpo.py's `build`).
"""

import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import pytest  # noqa: E402
from datasets import Dataset  # noqa: E402
from test_async_grpo import build, train_within  # noqa: E402

from dataflex_callbacks.errors import BatchError  # noqa: E402
from dataflex_callbacks.integrations.trl.async_queue import check_policy_version  # noqa: E402
from dataflex_callbacks.integrations.trl.async_rollout import InProcessRolloutWorker  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import save_tiny  # noqa: E402


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("async_queue_model"))


@pytest.fixture(scope="module")
def prompts():
    return Dataset.from_dict({"prompt": [f"{i}+{i % 7}=" for i in range(24)], "domain": ["add", "mul", "echo"] * 8})


class NegativeVersionWorker(InProcessRolloutWorker):
    """A worker that tags its samples with policy version -1 (a user's "unknown")."""

    def _score_group(self, example, prompt_ids, group, version, group_id, sample_class, *args, **kwargs):
        return super()._score_group(example, prompt_ids, group, -1, group_id, sample_class, *args, **kwargs)


def test_a_negative_policy_version_from_the_worker_is_refused_naming_the_fix(model_path, prompts, tmp_path):
    trainer, worker = build(model_path, prompts, tmp_path, strategy="diffband", worker_class=NegativeVersionWorker)
    # Before: accepted, and the sample counted one version staler than the trainer's own count.
    with pytest.raises(BatchError, match=r"a sample of group 0 has model_version -1, which is not a policy version"):
        train_within(trainer, worker, 120)
    assert trainer.state.global_step == 0


def test_a_trainer_version_past_int64_is_a_batch_error_not_an_overflow(model_path, prompts, tmp_path):
    trainer, worker = build(model_path, prompts, tmp_path, strategy="diffband")
    trainer.model_version = 2**63  # before: OverflowError inside RolloutBatch
    with pytest.raises(
        BatchError, match=r"AsyncGRPOTrainer\.model_version is 92233720368547758\d\d, .*leave model_version to TRL"
    ):
        train_within(trainer, worker, 120)


@pytest.mark.parametrize("version", [-1, 2**63, 1.0, True, "3", None])
def test_a_version_outside_0_to_int64_max_is_refused_with_its_value(version):
    with pytest.raises(BatchError, match=r"an int from 0 to 9223372036854775807") as caught:
        check_policy_version(version, "the sample's model_version is", "worker")
    assert repr(version) in str(caught.value)


@pytest.mark.parametrize("version", [0, 7, 2**63 - 1])
def test_every_int64_version_from_0_is_accepted(version):
    check_policy_version(version, "the sample's model_version is", "worker")
