"""Every registered component refuses an infinite or NaN number where only a finite one means something.

Issue 46: ``history_weight: .inf`` was accepted by screen's posterior rule, and so were a softmax
temperature, a mixer's floor, a band's focus weight, ... of inf. The one exception is the end of a
range, where the infinity of its own side means "no bound" (``diffband`` keeps every variance above 0).
"""

import inspect
import math

import pytest

from dataflex_callbacks.components import PromptHistory
from dataflex_callbacks.errors import ParamError
from dataflex_callbacks.registry import KINDS, build_component, component_class, list_components

# (kind, component, parameter) -> the one infinity it accepts: the ends of a range, unbounded on
# their own side. The other infinity would leave the range empty; NaN is refused everywhere.
UNBOUNDED_ENDS = {
    ("selector", "threshold_band", "low"): -math.inf,
    ("selector", "threshold_band", "high"): math.inf,
    ("reweighter", "reward_range", "low"): -math.inf,
    ("reweighter", "reward_range", "high"): math.inf,
}


def number_parameters(kind, name):
    """The parameters of a component that take one number: a float default, or a ``float`` (or optional
    float) annotation. A container of numbers (the static mixer's ``proportions``) is not one: it is checked
    by ``check_proportions``."""
    signature = inspect.signature(component_class(kind, name).__init__)
    return [
        parameter.name
        for parameter in signature.parameters.values()
        if isinstance(parameter.default, float) or set(str(parameter.annotation).split(" | ")) - {"None"} == {"float"}
    ]


CASES = [
    (kind, name, parameter, value)
    for kind in KINDS
    for name in list_components(kind)
    for parameter in number_parameters(kind, name)
    for value in (math.inf, -math.inf, math.nan)
]


@pytest.mark.parametrize("kind, name, parameter, value", CASES, ids=lambda v: str(v))
def test_every_number_parameter_of_every_component_refuses_infinity_and_nan(kind, name, parameter, value):
    if UNBOUNDED_ENDS.get((kind, name, parameter)) == value:
        component = build_component(kind, name, **{parameter: value})
        assert getattr(component, parameter) == value
        return
    with pytest.raises(ParamError) as error:
        build_component(kind, name, **{parameter: value})
    assert error.value.param == parameter and repr(parameter) in str(error.value)


def test_an_end_of_a_range_refuses_the_infinity_that_empties_it():
    with pytest.raises(ParamError, match=r"'high' is an upper end of a range: .* or inf for no bound; got -inf"):
        build_component("selector", "threshold_band", high=-math.inf)
    with pytest.raises(ParamError, match=r"'low' is a lower end of a range: .* or -inf for no bound; got inf"):
        build_component("reweighter", "reward_range", low=math.inf)


def test_the_cases_cover_the_parameters_the_issue_names_and_the_allow_list_is_current():
    """The signature finds every number parameter; a renamed bound would leave a stale allow-list entry."""
    found = {(kind, name, parameter) for kind, name, parameter, _ in CASES}
    named = {
        ("scorer", "group_solve_rate", "threshold"),
        ("scorer", "group_solve_rate", "success_threshold"),
        ("reweighter", "softmax", "temperature"),
        ("reweighter", "difficulty_band", "focus_weight"),
        ("reweighter", "reward_range", "inside"),
        ("reweighter", "reward_range", "outside"),
        ("reweighter", "per_advantage", "alpha"),
        ("mixer", "dump_ucb", "c"),
        ("pre_select", "skip_predicted", "prior_groups"),
        ("allocation", "screen", "history_weight"),
        ("allocation", "screen", "prior_strength"),
        ("allocation", "screen", "min_signal"),
        ("allocation", "adaptive", "threshold"),
        *(("mixer", mixer, "temperature") for mixer in ("dump_ucb", "learnability", "reward_gap", "tscl")),
        *(("mixer", mixer, "floor") for mixer in list_components("mixer")),
    }
    assert named <= found, named - found
    assert set(UNBOUNDED_ENDS) <= found
    assert {kind for kind, *_ in found} == set(KINDS)


@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_a_prompt_history_built_directly_checks_its_rate(value):
    """`PromptHistory` is public: its ``prior_rate`` is checked where it is kept, not only by ``skip_zero_variance``."""
    with pytest.raises(ParamError) as error:
        PromptHistory(prior_rate=value)
    assert error.value.param == "prior_rate"
