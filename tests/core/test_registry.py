"""Registry: names, aliases, import paths of user classes, and errors that name the bad value and the valid choices."""

import ast
import inspect
import os
import re
import subprocess
import sys

import custom_components
import pytest
import torch

from dataflex_callbacks import (
    ArgumentError,
    ConfigError,
    RolloutBatch,
    Scorer,
    build_component,
    build_strategy,
    list_components,
    register,
    registry,
)

EXPECTED = {
    "scorer": [
        "advantage_magnitude",
        "group_reward_variance",
        "group_solve_rate",
        "response_length",
        "reward",
        "reward_efficiency",
        "staleness",
        "token_entropy",
        "token_prob",
    ],
    "selector": ["entropy_top_tokens", "gfpo", "max_variance", "threshold_band", "topk_fraction"],
    "reweighter": [
        "advantage_reweight",
        "difficulty_band",
        "per_advantage",
        "reward_range",
        "softmax",
        "staleness_discount",
    ],
    "mixer": ["dump_ucb", "learnability", "reward_gap", "static", "tscl"],
}


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_registered_names(kind):
    assert list_components(kind) == EXPECTED[kind]


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_every_component_builds_with_defaults(kind):
    for name in list_components(kind):
        component = build_component(kind, name)
        assert component.name == name


def test_alias_resolves():
    assert "reward_difficulty" in list_components("scorer", include_aliases=True)
    assert build_component("scorer", "reward_difficulty").name == "reward"


def test_unknown_kind():
    with pytest.raises(ConfigError, match="valid kinds: scorer, selector, reweighter, mixer"):
        list_components("actuator")


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_unknown_name_lists_valid_ones(kind):
    with pytest.raises(ConfigError) as info:
        build_component(kind, "nope")
    message = str(info.value)
    assert "'nope'" in message
    for name in EXPECTED[kind]:
        assert name in message


def test_unknown_param_names_itself_and_accepted():
    with pytest.raises(ConfigError) as info:
        build_component("selector", "threshold_band", lo=0.1)
    assert "'lo'" in str(info.value) and "low" in str(info.value) and "high" in str(info.value)
    with pytest.raises(ConfigError, match="accepted: temperature, normalize"):
        build_component("reweighter", "softmax", temp=2)


@pytest.mark.parametrize(
    "kind, name, params, param",
    [
        ("scorer", "group_solve_rate", {"threshold": "x"}, "threshold"),
        ("scorer", "advantage_magnitude", {"reduce": "median"}, "reduce"),
        ("selector", "threshold_band", {"low": 0.9, "high": 0.1}, "low"),
        ("selector", "topk_fraction", {"fraction": 0.0}, "fraction"),
        ("selector", "topk_fraction", {"fraction": 1.5}, "fraction"),
        ("selector", "topk_fraction", {"largest": "yes"}, "largest"),
        ("selector", "gfpo", {"k": 0}, "k"),
        ("selector", "gfpo", {"k": 2.5}, "k"),
        ("selector", "gfpo", {"metric": "long"}, "metric"),
        ("selector", "max_variance", {"keep_fraction": 0}, "keep_fraction"),
        ("selector", "entropy_top_tokens", {"fraction": -0.1}, "fraction"),
        ("reweighter", "softmax", {"temperature": 0}, "temperature"),
        ("reweighter", "softmax", {"normalize": "sum_one"}, "normalize"),
        ("reweighter", "difficulty_band", {"low_q": 0.9, "high_q": 0.1}, "low_q"),
        ("reweighter", "difficulty_band", {"focus_weight": -1}, "focus_weight"),
        ("reweighter", "reward_range", {"inside": -1}, "inside"),
        ("reweighter", "advantage_reweight", {"alpha": 2}, "alpha"),
        ("reweighter", "per_advantage", {"alpha": float("nan")}, "alpha"),
        ("mixer", "reward_gap", {"temperature": -1}, "temperature"),
        ("mixer", "dump_ucb", {"c": -1}, "c"),
        ("mixer", "tscl", {"signed": 1}, "signed"),
        ("mixer", "learnability", {"floor": -0.1}, "floor"),
        ("mixer", "static", {"domains": ["a", "b"], "floor": 0.6}, "floor"),
        ("mixer", "static", {"domains": ["a", "b"], "proportions": {"a": 0.3, "b": 0.3}}, "sum"),
        ("mixer", "static", {"domains": ["a", "a"]}, "unique"),
    ],
)
def test_invalid_param_values_name_the_param(kind, name, params, param):
    with pytest.raises(ConfigError) as info:
        build_component(kind, name, **params)
    assert param in str(info.value)
    assert name in str(info.value)


# ---------------------------------------------------------------- user components: import paths and registered names

DIFFBAND_SELECTOR = {"name": "threshold_band", "low": 0.0, "high": float("inf")}


def group_batch():
    return RolloutBatch(torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.5]), group_ids=torch.tensor([0, 0, 1, 1, 2, 2]))


@pytest.mark.parametrize("path", ["custom_components:GroupCenteredReward", "custom_components.GroupCenteredReward"])
def test_a_config_names_a_user_class_by_import_path(path):
    assert registry.component_class("scorer", path) is custom_components.GroupCenteredReward
    strategy = build_strategy({"select": {"scorer": path, "selector": DIFFBAND_SELECTOR}})
    decision = strategy.apply(group_batch(), step=0)
    # Above its group's mean: row 0 of group 0 and row 5 of group 2; group 1 is all equal (0 > 0 is false).
    assert decision.keep.tolist() == [True, False, False, False, False, True]
    restored = build_strategy(strategy.state_dict()["config"])
    restored.load_state_dict(strategy.state_dict())
    assert torch.equal(restored.apply(group_batch(), step=0).keep, decision.keep)


def test_import_path_components_take_params_and_are_named_by_their_path():
    weights = registry.build_component("reweighter", "custom_components:LinearWeights", offset=1.0, normalize="none")
    assert weights.offset == 1.0
    assert weights.name == "custom_components:LinearWeights"
    with pytest.raises(ConfigError, match="'custom_components:LinearWeights' got unknown parameter.*'offst'"):
        registry.build_component("reweighter", "custom_components:LinearWeights", offst=1.0)
    strategy = build_strategy({"mix": {"mixer": "custom_components:LowestRewardFirst", "domains": ["a", "b"]}})
    assert strategy.mixing.mixer.name == "custom_components:LowestRewardFirst"


@pytest.mark.parametrize(
    "kind, path, words",
    [
        ("scorer", "no_such_package.mod:Cls", ["no module named 'no_such_package'", "PYTHONPATH"]),
        ("scorer", "custom_components:NoSuchClass", ["has no attribute 'NoSuchClass'"]),
        (
            "scorer",
            "custom_components:BestOfGroup",
            ["not a subclass of dataflex_callbacks.Scorer", "it is a selector"],
        ),
        ("mixer", "custom_components:group_means", ["a function", "not a subclass of dataflex_callbacks.Mixer"]),
        ("selector", "custom_components.torch", ["a module", "Selector"]),
        ("scorer", ":GroupCenteredReward", ["not an import path"]),
        (
            "pre_select",
            "custom_components:GroupCenteredReward",
            ["not a subclass of dataflex_callbacks.PreSelectFilter", "it is a scorer"],
        ),
    ],
)
def test_bad_import_paths_say_what_is_wrong(kind, path, words):
    with pytest.raises(ConfigError) as info:
        registry.build_component(kind, path)
    message = str(info.value)
    assert repr(path) in message
    for word in words:
        assert word in message, message


def test_a_bad_import_path_fails_when_the_strategy_is_built():
    with pytest.raises(
        ConfigError, match="'custom_components:LinearWeights' is class LinearWeights.*it is a reweighter"
    ):
        build_strategy({"select": {"scorer": "custom_components:LinearWeights", "selector": "threshold_band"}})


@pytest.fixture
def restore_registry():
    saved = {kind: dict(names) for kind, names in registry._REGISTRY.items()}
    saved_aliases = {kind: dict(names) for kind, names in registry._ALIASES.items()}
    saved_names = {cls: cls.name for names in saved.values() for cls in names.values()}
    yield
    for kind, names in saved.items():
        registry._REGISTRY[kind].clear()
        registry._REGISTRY[kind].update(names)
        registry._ALIASES[kind].clear()
        registry._ALIASES[kind].update(saved_aliases[kind])
    for cls, name in saved_names.items():
        cls.name = name


@pytest.mark.parametrize(
    "kind, taken",
    [
        ("scorer", "reward"),
        ("scorer", "reward_difficulty"),  # a name, an alias
        ("reweighter", "softmax"),
        ("mixer", "static"),
        ("selector", "gfpo"),
        ("pre_select", "skip_zero_variance"),
    ],
)
def test_registering_a_taken_name_is_refused(restore_registry, kind, taken):
    before = registry.component_class(kind, taken)

    class Mine(Scorer):
        """A user's class that happens to pick a taken name."""

    with pytest.raises(ConfigError) as info:
        register(kind, taken)(Mine)
    message = str(info.value)
    assert f"{taken!r}" in message and "already registered" in message and "override=True" in message
    assert registry.import_path(before) in message and "\n" not in message
    assert registry.component_class(kind, taken) is before and Mine.name != taken  # nothing replaced
    with pytest.raises(ConfigError, match="already registered"):
        register(kind, "test_free_name", aliases=(taken,))(Mine)  # a taken name as an alias, too
    assert "test_free_name" not in list_components(kind)


def test_override_replaces_a_registered_name_on_purpose_and_a_reloaded_class_registers_again(restore_registry):
    builtin = registry.component_class("scorer", "reward")

    @register("scorer", "reward", override=True)
    class ShiftedReward(builtin):
        """The built-in reward plus one."""

        def _score(self, batch):
            return super()._score(batch) + 1.0

    assert registry.component_class("scorer", "reward") is ShiftedReward
    assert build_component("scorer", "reward").score(RolloutBatch(torch.tensor([0.0, 1.0]))).tolist() == [1.0, 2.0]

    def define():  # the same module and qualified name each time, as after importlib.reload
        class Reloaded(custom_components.GroupCenteredReward):
            """A class whose module is loaded twice."""

        return Reloaded

    first, second = define(), define()
    register("scorer", "test_reloaded")(first)
    register("scorer", "test_reloaded")(second)  # the same class again: no override needed
    assert registry.component_class("scorer", "test_reloaded") is second


@pytest.mark.parametrize("through", ["reward", "reward_difficulty"])  # the name, then its alias
def test_override_through_any_name_replaces_the_class_under_all_its_names(restore_registry, through):
    builtin = registry.component_class("scorer", "reward")

    @register("scorer", through, override=True)
    class Mine(builtin):
        """A user's replacement of the built-in reward scorer."""

    assert {name: registry.component_class("scorer", name) for name in ("reward", "reward_difficulty")} == {
        "reward": Mine,
        "reward_difficulty": Mine,
    }
    assert builtin not in {registry.component_class("scorer", name) for name in list_components("scorer", True)}


@pytest.mark.parametrize(
    "name, aliases, words",
    [
        (123, (), "argument 'name' must be a non-empty string"),
        ("", (), "argument 'name' must be a non-empty string"),
        ("test_mine", "test_alias", "argument 'aliases' must be a tuple of names"),
        ("test_mine", (7,), "argument 'aliases' must be a non-empty string"),
    ],
)
def test_a_name_that_is_not_a_string_is_refused_and_the_registry_keeps_working(restore_registry, name, aliases, words):
    with pytest.raises(ArgumentError, match=words) as info:
        register("scorer", name, aliases)(custom_components.GroupCenteredReward)
    assert isinstance(info.value, TypeError) and repr(name) in str(info.value)
    assert list_components("scorer") == EXPECTED["scorer"]  # nothing registered: listing still sorts names
    assert list_components("scorer", include_aliases=True)


class NotAScorer:
    """A plain class, decorated as a scorer by mistake."""


def not_a_class():
    """A function, decorated as a scorer by mistake."""


@pytest.mark.parametrize(
    "kind, found, words",
    [
        ("scorer", NotAScorer, "scorer 'test_mine' is class NotAScorer, not a subclass of dataflex_callbacks.Scorer"),
        ("scorer", custom_components.LinearWeights, "(it is a reweighter: name it under the reweighter key)"),
        ("selector", not_a_class, "selector 'test_mine' is a function, not a subclass of dataflex_callbacks.Selector"),
    ],
)
def test_registering_what_is_not_a_component_of_the_kind_is_refused_as_the_import_path_route_refuses_it(
    restore_registry, kind, found, words
):
    with pytest.raises(ConfigError) as info:
        register(kind, "test_mine")(found)
    assert words in str(info.value)
    assert "test_mine" not in list_components(kind)


def test_a_registered_user_component_is_named_by_its_name(restore_registry):
    @register("scorer", "test_centered_copy")
    class CenteredCopy(custom_components.GroupCenteredReward):
        """A registered copy of GroupCenteredReward."""

    assert "test_centered_copy" in list_components("scorer")
    strategy = build_strategy({"select": {"scorer": "test_centered_copy", "selector": DIFFBAND_SELECTOR}})
    assert strategy.select.scorer.name == "test_centered_copy"
    assert strategy.apply(group_batch(), step=0).keep.tolist() == [True, False, False, False, False, True]


def test_an_unregistered_subclass_of_a_builtin_is_named_by_its_path():
    class Shifted(registry.component_class("scorer", "reward")):
        pass

    assert (
        Shifted.name == f"{__name__}:test_an_unregistered_subclass_of_a_builtin_is_named_by_its_path.<locals>.Shifted"
    )
    assert registry.component_class("scorer", "reward").name == "reward"
    assert issubclass(Shifted, Scorer)


def test_registry_imports_no_component_module():
    source = open(registry.__file__, encoding="utf-8").read()
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dataflex_callbacks")
    }
    assert imported == {"dataflex_callbacks.errors"}


@pytest.mark.parametrize(
    "statement",
    [
        "import dataflex_callbacks as d; r = d",
        "from dataflex_callbacks import registry as r",
        "from dataflex_callbacks.registry import build_component as b; import dataflex_callbacks.registry as r",
    ],
)
def test_builtins_are_registered_however_the_registry_is_imported(statement):
    script = f"{statement}\nprint({{k: r.list_components(k) for k in {sorted(EXPECTED) + ['pre_select']}}})"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ast.literal_eval(result.stdout.strip()) == {
        **EXPECTED,
        "pre_select": ["skip_predicted", "skip_zero_variance"],
    }


def test_a_stateful_user_component_resumes_through_the_strategy_state():
    config = {"reweight": {"scorer": "custom_components:RunningBaselineReward", "reweighter": "softmax"}}
    batch = RolloutBatch(
        torch.tensor([1.0, 0.0, 1.0, 1.0]), group_ids=torch.tensor([0, 0, 1, 1]), completion_mask=torch.ones(4, 3)
    )
    trained = build_strategy(config)
    for step in range(3):
        trained.apply(batch, step)
    state = trained.state_dict()
    assert state["components"] == {"reweight.scorer": {"baseline": trained.parts[0].scorer.baseline}}
    resumed = build_strategy(config)
    resumed.load_state_dict(state)
    assert resumed.parts[0].scorer.baseline == trained.parts[0].scorer.baseline != 0.0
    assert torch.equal(resumed.apply(batch, 3).weights, trained.apply(batch, 3).weights)


def builtin_components():
    """(kind, name) of every registered component that the library itself defines."""
    return [
        (kind, name)
        for kind in registry.KINDS
        for name in list_components(kind)
        if registry.component_class(kind, name).__module__.startswith("dataflex_callbacks.")
    ]


# A built-in class is named by one rule (docs/architecture.md, "One name per concept"): its registered
# name's words in CapWords, an acronym in capitals (PEP 8), then the last word of its kind's base class
# (Scorer, Selector, Reweighter, Mixer, PreSelectFilter), written once when the name already ends with
# it. A new acronym in a built-in's name is added here.
ACRONYMS = {"gfpo", "per", "tscl", "ucb"}


def kind_word(kind: str) -> str:
    """The last word of the kind's base class: ``Filter`` for ``pre_select`` (`PreSelectFilter`)."""
    return re.findall(r"[A-Z][a-z]*", registry._BASES[kind].__name__)[-1]


def class_name_of(kind: str, name: str) -> str:
    """The class name the rule gives built-in ``name`` of ``kind``: ``dump_ucb`` -> ``DumpUCBMixer``."""
    words = [word.upper() if word in ACRONYMS else word.capitalize() for word in name.split("_")]
    if kind_word(kind).lower().startswith(words[-1].lower()):  # advantage_reweight -> AdvantageReweighter
        words.pop()
    return "".join(words) + kind_word(kind)


def test_the_naming_rule_reads_as_written():
    assert [
        class_name_of(*pair)
        for pair in [
            ("scorer", "reward"),
            ("selector", "gfpo"),
            ("mixer", "dump_ucb"),
            ("reweighter", "advantage_reweight"),
            ("pre_select", "skip_predicted"),
        ]
    ] == ["RewardScorer", "GFPOSelector", "DumpUCBMixer", "AdvantageReweighter", "SkipPredictedFilter"]


@pytest.mark.parametrize("kind", registry.KINDS)
def test_every_builtin_class_is_named_by_the_rule(kind):
    names = {name: registry.component_class(kind, name) for kind_, name in builtin_components() if kind_ == kind}
    assert names, f"no built-in {kind}"
    wrong = {
        cls.__name__: class_name_of(kind, name)
        for name, cls in names.items()
        if cls.__name__ != class_name_of(kind, name)
    }
    assert not wrong, f"built-in {kind} classes named against the rule (found: expected): {wrong}"


@pytest.mark.parametrize("kind, name", builtin_components())
def test_every_builtin_parameter_has_one_default_and_help(kind, name):
    cls = registry.component_class(kind, name)
    params = registry.component_params(kind, name)
    assert [p.name for p in params] == registry.accepted_params(cls)
    for param in params:
        assert not param.required, f"{kind} {name!r}: parameter {param.name!r} has no default"
        assert param.default == inspect.signature(cls.__init__).parameters[param.name].default
        assert param.help.strip(), f"{kind} {name!r}: parameter {param.name!r} has no help in an Args: section"


def test_component_params_reads_the_class_docstring_then_its_bases(restore_registry):
    @register("reweighter", "test_documented")
    class Documented(registry.component_class("reweighter", "softmax")):
        """A softmax with one more knob.

        Args:
            temperature: this class's own words,
                over two lines.
            extra (int): an integer knob.
        """

        def __init__(self, temperature: float = 2.0, extra: int = 1, bare=None, *, needed, normalize: str = "none"):
            super().__init__(temperature, normalize)

    params = {p.name: p for p in registry.component_params("reweighter", "test_documented")}
    assert list(params) == ["temperature", "extra", "bare", "needed", "normalize"]
    assert params["temperature"].default == 2.0
    assert params["temperature"].help == "this class's own words, over two lines."
    assert (params["extra"].default, params["extra"].help) == (1, "an integer knob.")
    assert params["bare"].help == "" and params["bare"].default is None and not params["bare"].required
    assert params["needed"].required and params["needed"].default is registry.ParamInfo.REQUIRED
    assert params["normalize"].default == "none" and "mean_one" in params["normalize"].help  # from Reweighter's Args


def test_docstring_args_stops_at_the_next_section():
    doc = """Title.

    Args:
        low: the lower end.
        high: the upper
            end.

    Returns:
        nothing: not an argument.
    """
    assert registry.docstring_args(doc) == {"low": "the lower end.", "high": "the upper end."}
    assert registry.docstring_args("No sections.") == {} and registry.docstring_args(None) == {}


@pytest.mark.parametrize(
    "kind, name, params, param",
    [
        ("selector", "topk_fraction", {"fraction": "half"}, "fraction"),
        ("selector", "gfpo", {"k": 0}, "k"),
        ("selector", "threshold_band", {"low": 0.8, "high": 0.2}, "low"),
        ("scorer", "group_solve_rate", {"threshold": 0.5, "success_threshold": 0.5}, "threshold"),
    ],
)
def test_a_bad_parameter_is_a_param_error_naming_the_parameter(kind, name, params, param):
    from dataflex_callbacks.errors import ParamError

    with pytest.raises(ParamError) as built:  # through a config: prefixed with the component
        build_component(kind, name, **params)
    assert built.value.param == param and isinstance(built.value, (ConfigError, ValueError))
    with pytest.raises(ParamError) as direct:  # the class itself, as a user builds it
        registry.component_class(kind, name)(**params)
    assert direct.value.param == param
