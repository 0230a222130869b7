"""`RunOptions` is the one source of the `dataflex run` / `dataflex compare` flags: names, types, defaults,
help, rules.
"""

import dataclasses
import re

import pytest

from dataflex_callbacks.recipes.arguments import options_from_args, run_option_names, shared_option_names
from dataflex_callbacks.recipes.cli import build_parser, main
from dataflex_callbacks.recipes.compare.grid import CompareSettings
from dataflex_callbacks.recipes.options import (
    OPTION_RULES,
    PER_RUN_FIELDS,
    SUITE_DEFAULTS,
    NumberRule,
    RunInputError,
    RunOptions,
    check_run_options,
    completion_tokens,
    eval_tokens,
    option_flag,
)

FIELDS = dataclasses.fields(RunOptions)


def _squeeze(text: str) -> str:
    # argparse wraps help text (also at hyphens), so compare without any whitespace.
    return re.sub(r"\s+", "", text)


def _help(argv, capsys) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    return capsys.readouterr().out


def test_every_field_has_help_and_exactly_one_default():
    for option in FIELDS:
        assert isinstance(option.metadata.get("help"), str) and option.metadata["help"].strip(), option.name
        assert option.default is not dataclasses.MISSING, option.name  # every option is optional
        assert option.default_factory is dataclasses.MISSING, option.name
    assert RunOptions() == RunOptions(**{option.name: option.default for option in FIELDS})


def test_number_rules_live_with_the_fields():
    numeric = {o.name for o in FIELDS if o.type in ("int", "float", "int | None", "float | None")}
    assert set(OPTION_RULES) == numeric
    for option in FIELDS:
        rule = option.metadata.get("rule")
        if rule is not None:
            assert isinstance(rule, NumberRule)
            assert rule.optional == (option.default is None), option.name
    with pytest.raises(RunInputError, match=r"--num-generations must be an integer >= 2, got 1"):
        check_run_options(RunOptions(num_generations=1))
    with pytest.raises(
        RunInputError, match=r"unknown --verifier 'regex'; choose auto, numeric, exact or numeric_free_text"
    ):
        check_run_options(RunOptions(verifier="regex"))


def test_run_help_shows_every_field_with_its_help_and_default(capsys):
    out = _squeeze(_help(["run", "--help"], capsys))
    for option in FIELDS:
        flag = option_flag(option.name) if option.default is not True else "--no-" + option_flag(option.name)[2:]
        assert _squeeze(flag) in out, option.name
        # A --no-<name> flag's help says what turning the option off does.
        assert _squeeze(option.metadata["off_help" if option.default is True else "help"]) in out, option.name
        if not isinstance(option.default, bool):
            shown = option.metadata.get("shown_default", str(option.default))
            assert _squeeze(f"(default: {shown})") in out, option.name


def test_compare_help_shows_the_shared_run_fields(capsys):
    out = _squeeze(_help(["compare", "--help"], capsys))
    assert set(shared_option_names()) == {o.name for o in FIELDS} - set(PER_RUN_FIELDS)
    for name in shared_option_names():
        option = RunOptions.__dataclass_fields__[name]
        assert _squeeze(option_flag(name)) in out and _squeeze(option.metadata["help"]) in out, name
    for setting in dataclasses.fields(CompareSettings):  # compare's own flags document its settings' fields
        assert setting.metadata["help"].strip(), setting.name
        # progress: its flag is --no-progress, whose help says what turning it off hides (test_help_text.py)
        if setting.name not in ("base", "command", "progress"):
            assert _squeeze(setting.metadata["help"]) in out, setting.name


def test_parsed_defaults_are_the_dataclass_defaults():
    parser = build_parser()
    assert RunOptions(**options_from_args(parser.parse_args(["run"]), run_option_names())) == RunOptions()
    shared = options_from_args(parser.parse_args(["compare"]), shared_option_names())
    assert RunOptions(**shared) == RunOptions()


def test_flags_are_typed_by_their_field():
    args = build_parser().parse_args(
        [
            "run",
            "--domains",
            "echo, digit",
            "--no-progress",
            "--overwrite",
            "--steps",
            "7",
            "--learning-rate",
            "1e-4",
            "--beta",
            "0.1",
            "--n-test",
            "3",
        ]
    )
    options = RunOptions(**options_from_args(args, run_option_names()))
    assert options == dataclasses.replace(
        RunOptions(),
        domains=["echo", "digit"],
        progress=False,
        overwrite=True,
        steps=7,
        learning_rate=1e-4,
        beta=0.1,
        n_test=3,
    )
    assert type(options.steps) is int and type(options.learning_rate) is float


def test_domain_key_names_the_domain_column():
    args = build_parser().parse_args(["run", "--domain-key", "topic"])
    assert RunOptions(**options_from_args(args, run_option_names())).domain_key == "topic"


def test_token_lengths_have_one_rule():
    assert completion_tokens(RunOptions()) == 9 and completion_tokens(RunOptions(suite="toy")) == 4
    assert completion_tokens(RunOptions(model="some/model")) == 64
    assert completion_tokens(RunOptions(max_completion_length=12)) == 12
    assert eval_tokens(RunOptions()) == 9 and eval_tokens(RunOptions(suite="toy")) == 8
    assert eval_tokens(RunOptions(model="some/model")) == 64
    assert eval_tokens(RunOptions(eval_max_new_tokens=3)) == 3


def test_each_suite_has_its_defaults_and_a_users_model_or_data_keeps_the_toy_batch_shape():
    from dataflex_callbacks.recipes.options import with_suite_defaults

    testbed, toy = with_suite_defaults(RunOptions()), with_suite_defaults(RunOptions(suite="toy"))
    # A pretrained model; the testbed's own mix and held-out rows per level (None), 16 prompts a step.
    assert (testbed.steps, testbed.learning_rate, testbed.n_train, testbed.n_test) == (120, 1e-4, None, None)
    assert testbed.prompts_per_step == 16
    assert (toy.steps, toy.learning_rate, toy.n_train, toy.n_test, toy.prompts_per_step) == (150, 3e-3, 200, 50, 8)
    assert with_suite_defaults(RunOptions(dataset="d.jsonl")).n_test == 50  # rows held out of a user's data
    assert with_suite_defaults(RunOptions(model="m")).prompts_per_step == 8
    # A user's --model is pretrained: TRL's own default rate (GRPOConfig.learning_rate), not the toy model's 3e-3.
    assert with_suite_defaults(RunOptions(model="m")).learning_rate == 1e-6
    assert with_suite_defaults(RunOptions(model="m", dataset="d.jsonl")).learning_rate == 1e-6
    # On a user's --dataset the rate still follows the model trained: the testbed's pretrained one by default.
    testbed_rate = SUITE_DEFAULTS["testbed"]["learning_rate"]
    assert with_suite_defaults(RunOptions(dataset="d.jsonl")).learning_rate == testbed_rate
    assert with_suite_defaults(RunOptions(dataset="d.jsonl", suite="toy")).learning_rate == 3e-3
    assert with_suite_defaults(RunOptions(dataset="d.jsonl")).steps == 150
    assert with_suite_defaults(RunOptions(steps=7, learning_rate=1e-4)).steps == 7  # what the user sets stays


@pytest.mark.parametrize(
    "options",
    [
        RunOptions(),
        RunOptions(dataset="d.jsonl"),
        RunOptions(suite="toy"),
        RunOptions(suite="toy", dataset="d.jsonl"),
    ],
    ids=["testbed", "testbed model on --dataset", "toy", "toy model on --dataset"],
)
def test_the_default_rate_is_the_rate_of_the_model_the_run_loads(options):
    from dataflex_callbacks.recipes.options import SUITE_DEFAULTS, with_suite_defaults
    from dataflex_callbacks.recipes.runner import load_model

    options = with_suite_defaults(options)
    model, _, description = load_model(options)
    # The model the runner loads, not the data, decides the rate: 3e-3 wrecks the pretrained testbed model.
    expected = {"testbed": SUITE_DEFAULTS["testbed"], "tiny": SUITE_DEFAULTS["toy"]}[description]["learning_rate"]
    assert options.learning_rate == expected
    assert (description == "testbed") == (model.num_parameters() > 500_000)  # the pretrained 1M-parameter model


def test_the_pretrained_rate_is_trl_s_own_default():
    from trl import GRPOConfig

    from dataflex_callbacks.recipes.options import with_suite_defaults

    trl_default = next(f.default for f in dataclasses.fields(GRPOConfig) if f.name == "learning_rate")
    assert with_suite_defaults(RunOptions(model="m")).learning_rate == trl_default


@pytest.mark.parametrize("command", ["run", "compare"])
def test_a_reward_threshold_without_a_reward_is_refused_as_the_weights_are(command, capsys, tmp_path):
    with pytest.raises(RunInputError, match="--reward-threshold"):
        check_run_options(RunOptions(reward_threshold=0.5))
    check_run_options(RunOptions(reward=[lambda prompts, completions, **kw: [1.0]], reward_threshold=0.5))
    out = str(tmp_path / "out")
    for flag, value in (("--reward-threshold", "0.5"), ("--reward-weights", "1")):
        assert main([command, flag, value, "--output-dir", out]) == 2
        error = capsys.readouterr().err
        assert error.startswith("dataflex: error: ") and flag in error and "--reward" in error


def test_the_cost_model_is_read_from_the_command_line_and_only_changes_the_report(tmp_path):
    from dataflex_callbacks.recipes.compare.cli import settings_from_args
    from dataflex_callbacks.recipes.compare.cost_model import CostModel

    argv = ["compare", "--output-dir", str(tmp_path / "c")]
    plain = settings_from_args(build_parser().parse_args(argv))
    modelled = settings_from_args(build_parser().parse_args([*argv, "--cost-model", "gen_token=1.0, train_token=0.3"]))
    assert plain.cost_model is None and modelled.cost_model == CostModel(gen_token=1.0, train_token=0.3)
    # Report-only: finished runs of the same comparison are reused whatever the cost model.
    assert modelled.shared_key() == plain.shared_key()


@pytest.mark.parametrize(
    "bad, says",
    [
        ("gen_token=1.0", "train_token"),
        ("gen_token=1.0,train_token=0.3,other=2", "other"),
        ("gen_token=fast,train_token=0.3", "fast"),
        ("gen_token=-1,train_token=0.3", "-1"),
        ("gen_token=0,train_token=0", "above 0"),
        ("gen_token=nan,train_token=1", "nan"),
        ("gen_token 1.0", "gen_token 1.0"),
        ("gen_token=1,gen_token=2,train_token=1", "twice"),
    ],
)
def test_a_malformed_cost_model_is_refused_naming_the_fix(bad, says, tmp_path, capsys):
    from dataflex_callbacks.errors import DataFlexError
    from dataflex_callbacks.recipes.compare.cost_model import CostModel, CostModelError

    with pytest.raises(CostModelError, match=re.escape(says)) as info:
        CostModel.parse(bad)
    assert isinstance(info.value, DataFlexError)
    assert "--cost-model gen_token=1.0,train_token=0.3" in str(info.value)
    assert main(["compare", "--cost-model", bad, "--output-dir", str(tmp_path / "c"), "--no-progress"]) == 2
    assert "--cost-model" in capsys.readouterr().err and not (tmp_path / "c").exists()
