"""A TRL whose trainer lacks or changed a method the adapter wraps is refused at build / attach, in one line.

The "other TRL" is a real TRL trainer subclass with one wrapped method removed or given an older
signature (TRL < 1.7's ``_get_per_token_logps_and_entropies`` had no ``compute_aux_loss`` and
returned two values); TRL itself is never patched.
"""

import pytest
from packaging.version import Version
from trl import GRPOTrainer, RLOOTrainer

from dataflex_callbacks.integrations.trl import (
    DataFlexCallback,
    DataFlexGRPOTrainer,
    DataFlexRLOOCallback,
    DataFlexRLOOTrainer,
    DataFlexTrainerMixin,
    attach,
    compat,
)
from dataflex_callbacks.integrations.trl.callback import HOOKS


def _without(base: type, name: str) -> type:
    """A subclass of TRL's ``base`` on which method ``name`` is gone (``None`` hides the inherited one)."""
    return type(f"No{name}{base.__name__}", (base,), {name: None})


def _pre_aux_loss(base: type) -> type:
    """A subclass of TRL's ``base`` whose ``_get_per_token_logps_and_entropies`` has TRL 1.6's parameters."""

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        pixel_values=None,
    ):
        logps, entropies, _ = base._get_per_token_logps_and_entropies(
            self, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy
        )
        return logps, entropies

    return type(
        f"PreAuxLoss{base.__name__}",
        (base,),
        {"_get_per_token_logps_and_entropies": _get_per_token_logps_and_entropies},
    )


CHANGES = {
    "missing _compute_loss": lambda base: _without(base, "_compute_loss"),
    "missing _calculate_rewards": lambda base: _without(base, "_calculate_rewards"),
    "TRL 1.6 signature": _pre_aux_loss,
}


def _assert_refused(error: pytest.ExceptionInfo, method: str) -> None:
    message = str(error.value)
    assert "\n" not in message
    assert f"TRL {compat.installed_trl_version()}" in message
    assert f"trl>={compat.TRL_FLOOR}" in message and compat.TRL_NEWEST_TESTED in message
    assert method in message


def test_every_wrapped_method_has_its_expected_parameters():
    assert set(compat.WRAPPED_PARAMETERS) == set(HOOKS)


def test_the_installed_trl_passes(make_trainer, make_rloo):
    assert Version(compat.installed_trl_version()) >= Version(compat.TRL_FLOOR)
    attach(make_trainer(), "difffilter")
    attach(make_rloo(), "difffilter")
    assert make_trainer(cls=DataFlexGRPOTrainer, trainer_kwargs={"strategy": "difffilter"}).dataflex.attached
    assert make_rloo(cls=DataFlexRLOOTrainer, trainer_kwargs={"strategy": "difffilter"}).dataflex.attached


@pytest.mark.parametrize("change", CHANGES)
def test_attach_refuses_a_grpo_trainer_with_a_changed_wrapped_method(make_trainer, change):
    trainer = make_trainer(cls=CHANGES[change](GRPOTrainer))
    method = change.split()[-1] if change.startswith("missing") else "_get_per_token_logps_and_entropies"
    with pytest.raises(RuntimeError, match="is not supported by the TRL adapter") as error:
        attach(trainer, "difffilter")
    _assert_refused(error, method)
    assert not any(isinstance(cb, DataFlexCallback) for cb in trainer.callback_handler.callbacks)
    assert "_compute_loss" not in vars(trainer)  # nothing was wrapped


@pytest.mark.parametrize("change", CHANGES)
def test_a_dataflex_trainer_on_a_changed_grpo_trainer_is_refused_when_built(make_trainer, change):
    class ChangedDataFlexTrainer(DataFlexTrainerMixin, CHANGES[change](GRPOTrainer)):
        callback_class = DataFlexCallback

    method = change.split()[-1] if change.startswith("missing") else "_get_per_token_logps_and_entropies"
    with pytest.raises(RuntimeError, match="is not supported by the TRL adapter") as error:
        make_trainer(cls=ChangedDataFlexTrainer, trainer_kwargs={"strategy": "difffilter"})
    _assert_refused(error, method)


def test_rloo_with_a_changed_wrapped_method_is_refused_by_attach_and_the_trainer(make_rloo):
    trainer = make_rloo(cls=_pre_aux_loss(RLOOTrainer))
    with pytest.raises(RuntimeError, match="is not supported by the TRL adapter") as error:
        attach(trainer, "difffilter")
    _assert_refused(error, "PreAuxLossRLOOTrainer._get_per_token_logps_and_entropies")

    class ChangedDataFlexRLOOTrainer(DataFlexTrainerMixin, _without(RLOOTrainer, "_generate_and_score_completions")):
        callback_class = DataFlexRLOOCallback

    with pytest.raises(RuntimeError, match="is not supported by the TRL adapter") as error:
        make_rloo(cls=ChangedDataFlexRLOOTrainer, trainer_kwargs={"strategy": "difffilter"})
    _assert_refused(error, "_generate_and_score_completions is missing")


def test_a_method_absent_from_every_class_is_named_missing(make_trainer, monkeypatch):
    monkeypatch.setitem(compat.WRAPPED_PARAMETERS, "_generate_in_a_future_trl", ("inputs",))
    with pytest.raises(RuntimeError) as error:
        attach(make_trainer(), "difffilter")
    _assert_refused(error, "GRPOTrainer._generate_in_a_future_trl is missing")


def test_a_trl_older_than_the_floor_is_refused(make_trainer, monkeypatch):
    monkeypatch.setattr(compat, "installed_trl_version", lambda: "1.8.0")
    with pytest.raises(RuntimeError, match=r"TRL 1\.8\.0 is older than the TRL adapter supports") as error:
        attach(make_trainer(), "difffilter")
    _assert_refused(error, "pip install 'trl>=")


def test_a_method_taking_args_and_kwargs_is_accepted(make_trainer):
    class Forwarding(GRPOTrainer):
        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            return super()._get_per_token_logps_and_entropies(*args, **kwargs)

    attach(make_trainer(cls=Forwarding), "difffilter")
