"""Every state the adapter writes into a TRL checkpoint loads with safe loading (``torch.load(weights_only=True)``).

One test per preset family: a selection preset, reweighting, mixing, pre-rollout skipping and
skipping with mixing. Each saves at step 2 of 4, checks the file holds only tensors and plain
Python values, and resumes through TRL's own ``resume_from_checkpoint`` (whose loader reads the
file with ``weights_only=True``) to the same decisions as the uninterrupted run.
"""

import pytest
import torch

from dataflex_callbacks.integrations.trl import DataFlexGRPOTrainer
from dataflex_callbacks.integrations.trl.lifecycle import STATE_FILE

MIX = {"mixer": "learnability", "warmup_steps": 1, "update_every": 1}
FAMILIES = {
    "selection": "difffilter",
    "reweighting": "softmax",
    "mixing": {"mix": MIX},
    "skip": "skip",
    "skip+mix": {"pre_select": "skip_zero_variance", "mix": MIX},
}
SAFE_TYPES = (torch.Tensor, str, int, float, bool, type(None))


def unsafe_leaves(value, where="state"):
    """Paths of values that are not tensors, plain Python scalars, or dicts/lists/tuples of them."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in unsafe_leaves(v, f"{where}.{k}")] + [
            f"{where} key {k!r}" for k in value if not isinstance(k, (str, int))
        ]
    if isinstance(value, (list, tuple)):
        return [p for i, v in enumerate(value) for p in unsafe_leaves(v, f"{where}[{i}]")]
    return [] if type(value) in SAFE_TYPES or isinstance(value, torch.Tensor) else [f"{where}: {type(value).__name__}"]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_checkpoint_state_loads_safely_and_resumes_to_the_same_decisions(make_trainer, tmp_path, family):
    settings = dict(
        cls=DataFlexGRPOTrainer,
        max_steps=4,
        save_strategy="steps",
        save_steps=2,
        output_dir=str(tmp_path / "full"),
        trainer_kwargs={"strategy": FAMILIES[family], "record_decisions": True},
    )
    full = make_trainer(**settings)
    full.train()
    path = tmp_path / "full" / "checkpoint-2" / STATE_FILE
    saved = torch.load(path, weights_only=True)  # raises UnpicklingError on numpy or other objects
    assert unsafe_leaves(saved) == []
    if family != "selection" and family != "reweighting":
        assert "sampler" in saved

    settings["output_dir"] = str(tmp_path / "resumed")
    resumed = make_trainer(**settings)
    resumed.train(resume_from_checkpoint=str(path.parent))
    assert [h["step"] for h in resumed.dataflex.decisions] == [2, 3]
    for a, b in zip(full.dataflex.decisions[2:], resumed.dataflex.decisions, strict=True):
        assert a["step"] == b["step"] and a["prompt_keys"] == b["prompt_keys"]
        assert torch.equal(a["keep"], b["keep"]) and torch.equal(a["weights"], b["weights"])
        assert a["metrics"] == b["metrics"]


def test_a_file_with_unsafe_objects_is_refused_with_the_fix(make_trainer, tmp_path):
    import numpy as np

    from dataflex_callbacks.errors import StateError

    trainer = make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": "difffilter"})
    state = {
        "strategy": trainer.dataflex.strategy.state_dict(),
        "config": trainer.dataflex.strategy.config,
        "legacy": np.arange(3),
    }  # what an older version could have written
    torch.save(state, tmp_path / STATE_FILE)
    with pytest.raises(StateError, match=r"weights_only=True.*load_state\(checkpoint_folder, weights_only=False\)"):
        trainer.dataflex.load_state(str(tmp_path))
    assert trainer.dataflex.load_state(str(tmp_path), weights_only=False)


def test_a_file_that_is_not_a_strategy_state_is_refused(make_trainer, tmp_path):
    from dataflex_callbacks.errors import StateError

    trainer = make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": "difffilter"})
    torch.save([1, 2, 3], tmp_path / STATE_FILE)
    with pytest.raises(StateError, match="is not a DataFlex strategy state"):
        trainer.dataflex.load_state(str(tmp_path))
