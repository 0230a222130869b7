"""`dataflex_callbacks.testing.check_component`: every built-in passes it, a user's component passes,
broken ones fail clearly.
"""

import ast
import inspect

import custom_components
import pytest
import torch
from custom_components import BestOfGroup, GroupCenteredReward, LinearWeights, LowestRewardFirst, RunningBaselineReward

from dataflex_callbacks import Mixer, Reweighter, Scorer, Selector, list_components
from dataflex_callbacks.components import AdaptiveAllocator, ScreenAllocator
from dataflex_callbacks.testing import ConformanceError, ConformanceReport, check_component, conformance

KINDS = ("scorer", "selector", "reweighter", "mixer")
BATCH_CHECKS = ["declarations", "output contract", "non-finite inputs", "group loop"]
# Parameters that change which code path runs, beyond the defaults.
VARIANTS = [
    ("scorer", "advantage_magnitude", {"reduce": "sum"}),
    ("scorer", "advantage_magnitude", {"reduce": "max"}),
    ("scorer", "group_solve_rate", {"threshold": 0.0}),
    ("selector", "gfpo", {"metric": "short", "k": 2}),
    ("selector", "gfpo", {"metric": "score", "k": 1}),
    ("selector", "topk_fraction", {"fraction": 0.3, "largest": False}),
    ("selector", "max_variance", {"keep_fraction": 0.7}),
    ("selector", "threshold_band", {"low": 0.2, "high": 0.6}),
    ("selector", "entropy_top_tokens", {"fraction": 0.5}),
    ("reweighter", "reward_range", {"inside": 0.0, "outside": 0.0}),  # all-zero raw weights: the uniform fallback
    ("mixer", "static", {"proportions": {"math": 0.5, "code": 0.3, "chat": 0.2}}),
    ("mixer", "tscl", {"signed": True}),
] + [
    ("reweighter", name, {"normalize": mode})
    for name in ("softmax", "difficulty_band", "reward_range", "advantage_reweight", "per_advantage")
    for mode in ("per_group_mean_one", "none")
]


@pytest.mark.parametrize("kind, name", [(kind, name) for kind in KINDS for name in list_components(kind)])
def test_every_builtin_component_conforms(kind, name):
    report = check_component(name, kind=kind)
    assert isinstance(report, ConformanceReport)
    assert [check for check in report.passed if check != "raw values"][:4] == BATCH_CHECKS
    assert ("raw values" in report.passed) == (kind in ("reweighter", "mixer"))
    assert report.kind == kind and report.component == name
    assert ("cuda" in report.passed) == torch.cuda.is_available()
    if not torch.cuda.is_available():
        assert report.skipped["cuda"] == "CUDA is not available on this machine"


@pytest.mark.parametrize("kind, name, params", VARIANTS)
def test_builtin_variants_conform(kind, name, params):
    check_component(name, kind=kind, params=params)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_builtins_conform_on_other_batches(seed):
    for kind in KINDS:
        for name in list_components(kind):
            check_component(name, kind=kind, seed=seed)


def test_the_device_comparison_runs(monkeypatch):
    # Without a GPU the cuda check is skipped; its comparison code still runs here, against a second CPU copy.
    monkeypatch.setattr(conformance, "cuda_device", lambda: "cpu")
    for kind, name in (("scorer", "group_reward_variance"), ("selector", "max_variance"), ("mixer", "dump_ucb")):
        assert "cuda" in check_component(name, kind=kind).passed


# ---------------------------------------------------------------- a user's component, through the public API


def test_custom_components_use_only_the_public_api():
    tree = ast.parse(inspect.getsource(custom_components))
    imported = [
        (node.module, [a.name for a in node.names])
        if isinstance(node, ast.ImportFrom)
        else (None, [a.name for a in node.names])
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
    ]
    assert imported == [(None, ["torch"]), ("dataflex_callbacks", ["Mixer", "Reweighter", "Scorer", "Selector"])]


def reference_group_centered(batch):
    """The rule written as a plain loop over one group's rows."""
    rewards = batch.rewards.tolist()
    mean = sum(rewards) / len(rewards)
    return torch.tensor([r - mean for r in rewards])


@pytest.mark.parametrize(
    "component, params, reference",
    [
        (GroupCenteredReward, {}, reference_group_centered),
        (RunningBaselineReward, {"momentum": 0.5}, lambda batch: batch.rewards),  # a fresh baseline is 0
        (BestOfGroup, {}, lambda scores, batch: scores == scores.max()),
        (LinearWeights, {"offset": 0.25, "normalize": "none"}, lambda scores, batch, mask: (scores + 0.25) * mask),
        (LowestRewardFirst, {"floor": 0.1}, None),
    ],
)
def test_a_custom_component_conforms(component, params, reference):
    report = check_component(component, params=params, reference=reference)
    assert "group loop" in report.passed
    assert ("reference" in report.passed) == (reference is not None)
    assert ("state_dict" in report.passed) == (component is RunningBaselineReward)
    assert report.component == f"custom_components:{component.__name__}"  # unregistered: named by import path


def test_an_instance_is_checked_as_given():
    report = check_component(RunningBaselineReward(momentum=0.0))
    assert report.kind == "scorer" and "state_dict" in report.passed


# ---------------------------------------------------------------- broken components fail with a clear message


class ColumnScores(Scorer):
    """Wrong shape: (N, 1) instead of (N,)."""

    def _score(self, batch):
        return batch.rewards.unsqueeze(1)


class BatchCenteredReward(Scorer):
    """A group-dependence mistake: declared scope 'group' (the default) but centred on the whole batch's mean."""

    requires = ("rewards", "group_ids")

    def _score(self, batch):
        return batch.rewards - batch.rewards.mean()


class InverseEntropy(Scorer):
    """1/entropy: infinite where nan_policy set a NaN entropy to 0."""

    requires = ("entropies",)
    granularity = "token"
    scope = "row"

    def _score(self, batch):
        return 1.0 / batch.entropies


class FloatMask(Selector):
    """Returns a float mask instead of a bool one."""

    scope = "row"

    def _select(self, scores, batch):
        return (scores > 0.5).float()


class SignedWeights(Reweighter):
    """Negative weights."""

    scope = "row"

    def _raw(self, scores, mask):
        return scores - 0.2


class AllNegativeWeights(Reweighter):
    """Raw weights all below 0 (on 256ad1c the mean-one normalisation made them uniform weights, silently)."""

    scope = "row"

    def _raw(self, scores, mask):
        return -1.0 - scores


class CenteredGroupWeights(Reweighter):
    """Raw weights of both signs (score minus 0.5) under the default scope 'group'."""

    def _raw(self, scores, mask):
        return scores - 0.5


class InPlaceWeights(Reweighter):
    """Modifies the caller's scores in place."""

    scope = "row"

    def _raw(self, scores, mask):
        return scores.clamp_min_(0.0).add_(0.5)


class PositionMixer(Mixer):
    """Proportions by list position, not by the domains' statistics."""

    def raw_proportions(self, tracker):
        return torch.arange(1.0, len(self.domains) + 1, dtype=torch.float64)


class MinusOneMixer(Mixer):
    """Raw proportions all -1: normalised, they would read as 1/K each."""

    def raw_proportions(self, tracker):
        return -torch.ones(len(self.domains), dtype=torch.float64)


class ForgetfulBaseline(RunningBaselineReward):
    """Its load_state_dict restores nothing."""

    def load_state_dict(self, state):
        pass


class NotAScorer:
    granularity = "response"


@pytest.mark.parametrize(
    "component, check, words",
    [
        (ColumnScores, "output contract", ["returned shape (", "(N,)"]),
        (BatchCenteredReward, "group loop", ["scope='group'", "run alone", "declare scope='batch'"]),
        (InverseEntropy, "non-finite inputs", ["inf", "nan_policy"]),
        (FloatMask, "output contract", ["torch.bool"]),
        (SignedWeights, "raw values", ["_raw returned -", "negative or not finite", "finite and >= 0"]),
        (AllNegativeWeights, "raw values", ["(all of the", "must be finite and >= 0", "cannot repair a sign"]),
        (CenteredGroupWeights, "raw values", ["_raw returned -", "must be finite and >= 0"]),
        (MinusOneMixer, "raw values", ["'math': -1.0", "must be finite, >= 0 and not all 0"]),
        (InPlaceWeights, "output contract", ["changed its input(s) scores in place"]),
        (PositionMixer, "group loop", ["reverse order", "not its position"]),
        (ForgetfulBaseline, "state_dict", ["load_state_dict"]),
    ],
)
def test_a_broken_component_fails_naming_the_check(component, check, words):
    with pytest.raises(ConformanceError) as info:
        check_component(component)
    message = str(info.value)
    assert isinstance(info.value, AssertionError)
    assert f"'{component.__module__}:{component.__name__}' failed the {check!r} check" in message
    for word in words:
        assert word in message, message


def test_a_wrong_reference_fails():
    with pytest.raises(ConformanceError, match="failed the 'reference' check.*group_id"):
        check_component(GroupCenteredReward, reference=lambda batch: batch.rewards - batch.rewards.max())


def test_a_class_of_no_kind_fails_declarations():
    with pytest.raises(ConformanceError, match="'declarations' check.*subclasses none of Scorer, Selector"):
        check_component(NotAScorer)
    with pytest.raises(ConformanceError, match="does not subclass Selector"):
        check_component(GroupCenteredReward, kind="selector")


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="pass kind="):
        check_component("reward")
    with pytest.raises(ValueError, match="pre_select"):
        check_component("skip_zero_variance", kind="pre_select")
    with pytest.raises(ValueError, match="instance and params="):
        check_component(LinearWeights(), params={"offset": 1.0})


# ---------------------------------------------------------------- allocators (kind "allocation")

ALLOCATOR_CHECKS = ["declarations", "output contract", "counts", "group loop", "state_dict"]
ALLOCATOR_VARIANTS = [
    {},
    {"pilot": 1},
    {"rule": "posterior", "min_signal": 0.7},
    {"rule": "posterior", "prior_strength": 4.0, "history_weight": 0.0},
]


@pytest.mark.parametrize("name", list_components("allocation"))
def test_every_builtin_allocator_conforms(name):
    report = check_component(name, kind="allocation")
    assert report.kind == "allocation" and report.component == name
    assert report.passed == ALLOCATOR_CHECKS + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("params", ALLOCATOR_VARIANTS)
def test_screen_variants_conform(params):
    check_component("screen", kind="allocation", params=params)


@pytest.mark.parametrize("seed", [1, 2])
def test_allocators_conform_on_other_rewards(seed):
    check_component("adaptive", kind="allocation", params={"stage": 2, "cap": 6, "reuse": True}, seed=seed)
    check_component("screen", kind="allocation", params={"rule": "posterior"}, seed=seed)


def test_the_allocator_device_comparison_runs(monkeypatch):
    monkeypatch.setattr(conformance, "cuda_device", lambda: "cpu")
    assert "cuda" in check_component("screen", kind="allocation").passed


class UncountedCommits(ScreenAllocator):
    """Counts its pilots but not its commits: a run's compute would be undercounted."""

    def record(self, pilot, commit, *args, **kwargs):
        super().record(pilot, torch.zeros_like(commit), *args, **kwargs)


class AboveTheBatchMedian(ScreenAllocator):
    """Commits the prompts whose pilot passes more often than the batch's median: a prompt's answer reads others."""

    def next_round(self, tally, keys=None, domains=None):
        rate = tally.passes.double() / tally.trials.clamp(min=1)
        chosen = (tally.trials == self.pilot) & (rate > rate.median())
        return torch.where(chosen, self.group_size - self.pilot, 0).long()


class FractionalCounts(ScreenAllocator):
    def next_round(self, tally, keys=None, domains=None):
        return super().next_round(tally, keys, domains).float() / 2


class AsksForever(AdaptiveAllocator):
    def next_round(self, tally, keys=None, domains=None):
        return torch.ones(len(tally.trials), dtype=torch.long)


@pytest.mark.parametrize(
    "component, check, words",
    [
        (UncountedCommits, "counts", ["alloc/step_generated", "Allocator.record"]),
        (AboveTheBatchMedian, "group loop", ["alone gets"]),
        (FractionalCounts, "output contract", ["integer counts"]),
        (AsksForever, "output contract", ["after 64 rounds"]),
    ],
)
def test_a_broken_allocator_fails_naming_the_check(component, check, words):
    with pytest.raises(ConformanceError) as info:
        check_component(component)
    message = str(info.value)
    assert f"failed the {check!r} check" in message, message
    for word in words:
        assert word in message, message


def test_an_allocator_takes_no_reference():
    with pytest.raises(ValueError, match="no reference= check for an allocator"):
        check_component("screen", kind="allocation", reference=lambda tally: tally.trials)
