"""`check_trl_strategy`: every strategy/setting combination the TRL adapter refuses, in one function that the
adapter runs when it binds a trainer and that `dataflex compare` runs before anything trains."""

import pytest
import torch
from trl import GRPOTrainer

from dataflex_callbacks import Allocator, build_strategy, register, registry
from dataflex_callbacks.errors import ConfigError, DataFlexError
from dataflex_callbacks.integrations.trl import DataFlexCallback, DataFlexGRPOTrainer, DataFlexRLOOCallback
from dataflex_callbacks.integrations.trl.trainer_settings import TrainerSettings, check_trl_strategy

SCREEN_PILOT_1_SKIPPING = {"pre_select": "skip_zero_variance", "allocation": {"name": "screen", "params": {"pilot": 1}}}
SCREEN_OF_8 = {"allocation": {"name": "screen", "params": {"group_size": 8}}}
ADAPTIVE_REUSE = {"allocation": {"name": "adaptive", "params": {"reuse": True}}}
ADAPTIVE_STAGE_8 = {"allocation": {"name": "adaptive", "params": {"stage": 8}}}

# (strategy, host, settings, what the one line names): every refusal of check_trl_strategy.
REFUSALS = [
    ("adaptive+skip", DataFlexCallback, TrainerSettings(8), "allocation 'adaptive' with a pre_select part"),
    (ADAPTIVE_STAGE_8, DataFlexCallback, TrainerSettings(4), "first stage of 8 .* above num_generations = 4"),
    ("adaptive", DataFlexCallback, TrainerSettings(8, num_processes=3), "stages of 4 completions on 3 processes"),
    ("screen+dump_ucb", DataFlexCallback, TrainerSettings(8), "allocation .* mix part"),
    ("dapo+dump_ucb", DataFlexCallback, TrainerSettings(8), "dynamic_sampling .* mix part"),
    (SCREEN_PILOT_1_SKIPPING, DataFlexCallback, TrainerSettings(8), "pre_select part with a pilot of 1"),
    ("screen", DataFlexCallback, TrainerSettings(2), r"'pilot' must be below the group size \(2\)"),
    (SCREEN_OF_8, DataFlexCallback, TrainerSettings(4), "group_size=8.*groups of 4"),
    ("screen", DataFlexCallback, TrainerSettings(5, num_processes=2), "multiple of 2"),
    ("screen", DataFlexCallback, TrainerSettings(8, environment_factories=True), "environment_factories"),
    ("dapo", DataFlexCallback, TrainerSettings(8, environment_factories=True), "environment_factories"),
    ("skip", DataFlexCallback, TrainerSettings(8, shuffle_dataset=False), r"GRPOConfig\(shuffle_dataset=False\)"),
    ("dump_ucb", DataFlexCallback, TrainerSettings(8, shuffle_dataset=False), "shuffle_dataset=False"),
    ("dapo", DataFlexRLOOCallback, TrainerSettings(8), "dynamic_sampling .* DataFlexRLOOTrainer"),
    ("screen", DataFlexRLOOCallback, TrainerSettings(8), "allocation .* DataFlexRLOOTrainer"),
]


@pytest.mark.parametrize("spec, host, settings, named", REFUSALS)
def test_each_refusal_is_one_line_naming_the_part_and_the_setting(spec, host, settings, named):
    with pytest.raises(DataFlexError, match=named) as caught:
        check_trl_strategy(build_strategy(spec), host, settings)
    assert "\n" not in str(caught.value).strip()
    with pytest.raises(DataFlexError, match=named):  # the callback's entry point is the same function
        host.check_strategy(spec, settings)


@pytest.mark.parametrize(
    "spec", ["baseline", "screen", "dapo", "skip", "dump_ucb", "screen_greso", "difffilter", "adaptive", ADAPTIVE_REUSE]
)
def test_what_the_adapter_runs_passes(spec):
    check_trl_strategy(build_strategy(spec), DataFlexCallback, TrainerSettings(8))


def test_the_rules_on_the_strategy_alone_skip_the_settings():
    """Without settings (``dataflex validate --host trl``) a pilot the group size would refuse passes."""
    check_trl_strategy(build_strategy("screen"), DataFlexCallback, None)
    check_trl_strategy(build_strategy(ADAPTIVE_STAGE_8), DataFlexCallback, None)
    check_trl_strategy(build_strategy(ADAPTIVE_REUSE), DataFlexCallback, None)
    with pytest.raises(ConfigError, match="allocation 'adaptive' with a pre_select part"):
        check_trl_strategy(build_strategy("adaptive+skip"), DataFlexCallback, None)


def test_a_check_binds_nothing():
    strategy = build_strategy("screen")
    check_trl_strategy(strategy, DataFlexCallback, TrainerSettings(8))
    assert strategy.allocation.group_size is None


def test_the_adapter_refuses_at_build_with_the_same_function(make_trainer):
    """A trainer built with num_generations=2 refuses `screen` with the message the check gives for its settings."""
    with pytest.raises(DataFlexError) as expected:
        check_trl_strategy(build_strategy("screen"), DataFlexCallback, TrainerSettings(2))
    with pytest.raises(DataFlexError) as built:
        make_trainer(cls=DataFlexGRPOTrainer, num_generations=2, trainer_kwargs={"strategy": "screen"})
    assert str(built.value) == str(expected.value)


def test_settings_read_from_a_trainer(make_trainer):
    trainer = make_trainer(cls=GRPOTrainer, num_generations=4, shuffle_dataset=False)
    assert TrainerSettings.of(trainer) == TrainerSettings(
        num_generations=4,
        num_processes=1,
        shuffle_dataset=False,
        environment_factories=False,
        config_name="GRPOConfig",
        loss_type="dapo",
    )


class PredictedSignalAllocator(Allocator):
    """A rule of its own, not `screen`'s subclass: a pilot of 2, then the rest of a group of G where it is unsure."""

    name = "predicted_signal"
    rounds_per_step = 2

    def first_round(self) -> int:
        return 2

    def next_round(self, tally, keys=None, domains=None):
        return torch.where(tally.trials == 2, self.group_size - 2, 0)


class StagedAllocator(PredictedSignalAllocator):
    """The same rule, declaring that its rounds per step vary."""

    name = "staged"
    rounds_per_step = None


@pytest.fixture
def own_allocators():
    """Registered for one test, then removed: the other tests' registry stays the built-in one."""
    register("allocation", "predicted_signal")(PredictedSignalAllocator)
    register("allocation", "staged")(StagedAllocator)
    yield
    for name in ("predicted_signal", "staged"):
        registry._REGISTRY["allocation"].pop(name, None)


def test_the_trl_host_reads_what_an_allocator_declares_not_its_class(own_allocators):
    check_trl_strategy(build_strategy({"allocation": "predicted_signal"}), DataFlexCallback, TrainerSettings(8))
    with pytest.raises(ConfigError, match=r"allocation 'staged' \(a varying number of rounds per step") as error:
        check_trl_strategy(build_strategy({"allocation": "staged"}), DataFlexCallback, TrainerSettings(8))
    assert "\n" not in str(error.value)
