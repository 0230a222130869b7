"""`dataflex validate FILE [--host]`: a file passes exactly when the host that runs it would accept it.

Each row is one file and one command line. Host refusals come from the adapters' own checks, so
a row's message is the adapter's message (`test_the_verl_refusal_is_the_adapters_own` pins one).
"""

import json

import pytest

from dataflex_callbacks.recipes.cli import main

VERL_RUN = "algorithm:\n  adv_estimator: grpo\ntrainer:\n  total_epochs: 1\n"
GROUP_SELECT = "select:\n  scorer: group_reward_variance\n  selector: {name: threshold_band, low: 0.0, high: .inf}\n"
DYNAMIC = GROUP_SELECT + "dynamic_sampling: true\n"
TOKEN_DYNAMIC = (
    "select:\n  scorer: token_entropy\n  selector: {name: entropy_top_tokens, fraction: 0.2}\ndynamic_sampling: true\n"
)
MIX_DYNAMIC = DYNAMIC + "mix: {mixer: static}\n"
EXAMPLE = "examples/verl/grpo_qwen05b_gsm8k_difffilter.yaml"
TWO_SELECTS = GROUP_SELECT + "select:\n  scorer: reward\n  selector: topk_fraction\n"
# About 1 KB of nested aliases expanding to 9**9 values (billion laughs): reading it must not hang.
ALIAS_BOMB = (
    "a: &a [x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"l{i}: &l{i} [" + ", ".join([f"*{'a' if i == 1 else f'l{i - 1}'}"] * 9) + "]\n" for i in range(1, 9))
    + "select: *l8\n"
)

# (id, file content (or a repository path), --host, exit code, text expected on stderr)
ROWS = [
    (
        "verl-file-dynamic-sampling",
        VERL_RUN + "dataflex:\n  strategy: dapo\n",
        None,
        2,
        "for verl: verl config 'dataflex': dynamic_sampling is done by verl itself",
    ),
    (
        "verl-file-inline-dynamic-sampling",
        VERL_RUN + "dataflex:\n  " + DYNAMIC.replace("\n", "\n  "),
        None,
        2,
        "dynamic_sampling is done by verl itself",
    ),
    ("strategy-file-host-verl", DYNAMIC, "verl", 2, "for verl: verl config 'dataflex': dynamic_sampling"),
    (
        "verl-quota-without-mix",
        VERL_RUN + "dataflex: {strategy: difffilter, quota: exact}\n",
        None,
        2,
        "dataflex.quota sets the per-batch domain counts of a mix part",
    ),
    (
        "verl-unknown-loss-agg-mode",
        VERL_RUN + "actor_rollout_ref: {actor: {loss_agg_mode: mean-of-means}}\ndataflex: {strategy: difffilter}\n",
        None,
        2,
        "unknown verl loss_agg_mode 'mean-of-means'",
    ),
    ("verl-file-without-block", VERL_RUN, None, 2, "has no 'dataflex:' block"),
    (
        "verl-block-disabled",
        VERL_RUN + "dataflex: {strategy: difffilter, enable: false}\n",
        None,
        0,
        "valid for verl: its dataflex block is disabled",
    ),
    ("verl-example-config", EXAMPLE, None, 0, "valid for verl"),
    (
        "verl-mix-with-quota",
        VERL_RUN + "dataflex:\n  quota: exact\n  mix: {mixer: static}\n",
        None,
        0,
        "valid for verl",
    ),
    (
        "rloo-dynamic-sampling",
        DYNAMIC,
        "trl-rloo",
        2,
        "for trl-rloo: dynamic_sampling is not supported by the TRL adapter's DataFlexRLOOTrainer",
    ),
    (
        "grpo-dynamic-sampling-with-mix",
        MIX_DYNAMIC,
        "trl",
        2,
        "for trl: dynamic_sampling in the TRL adapter does not support a strategy with a mix part",
    ),
    ("grpo-dynamic-sampling", DYNAMIC, "trl", 0, "valid for trl"),
    ("lightning-dynamic-sampling-with-mix", MIX_DYNAMIC, "lightning", 0, "valid for lightning"),
    ("core-token-level-dynamic-sampling", TOKEN_DYNAMIC, None, 2, "dynamic_sampling judges whole groups"),
    ("lightning-token-level-dynamic-sampling", TOKEN_DYNAMIC, "lightning", 2, "dynamic_sampling judges whole groups"),
    ("core-plain-strategy", GROUP_SELECT, None, 0, "checked with the core rules"),
    # Issue 46: YAML kept the last of two keys silently, and an alias bomb hung the command.
    ("core-key-given-twice", TWO_SELECTS, None, 2, "line 4: key 'select' is given twice, on line 1 and line 4"),
    ("trl-key-given-twice", TWO_SELECTS, "trl", 2, "line 4: key 'select' is given twice"),
    ("core-alias-bomb", ALIAS_BOMB, None, 2, "expand to more than 100,000 values"),
    ("lightning-alias-bomb", ALIAS_BOMB, "lightning", 2, "expand to more than 100,000 values"),
    # Strategy keys beside the block: verl reads only the block, so they would be ignored.
    (
        "verl-strategy-keys-beside-block",
        VERL_RUN + GROUP_SELECT + "dataflex: {strategy: difffilter}\n",
        None,
        2,
        "strategy key(s) ['select'] beside it, which would be ignored",
    ),
    (
        "verl-reference-keys-beside-block",
        VERL_RUN + "mechanism: select\ndataflex: {strategy: difffilter}\n",
        None,
        2,
        "strategy key(s) ['mechanism'] beside it",
    ),
    (
        "strategy-keys-beside-block-host-verl",
        GROUP_SELECT + "dataflex:\n  " + GROUP_SELECT.replace("\n", "\n  "),
        "verl",
        2,
        "put the whole strategy inside 'dataflex:'",
    ),
]
NEEDS = {"trl": "trl", "trl-rloo": "trl", "lightning": "lightning"}


@pytest.mark.parametrize("content, host, code, message", [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_validate_checks_for_the_host_of_the_file(tmp_path, capsys, content, host, code, message):
    if host in NEEDS:
        pytest.importorskip(NEEDS[host])
    if content == EXAMPLE:
        path = EXAMPLE
    else:
        path = tmp_path / "config.yaml"
        path.write_text(content)
    assert main(["validate", str(path)] + (["--host", host] if host else [])) == code
    out, err = capsys.readouterr()
    assert message in err
    if code == 2:
        assert err.count("\n") == 1 and err.startswith("dataflex: error: invalid strategy") and not out
    else:
        json.loads(out)  # the resolved config (null for a disabled block)


def test_the_verl_refusal_is_the_adapters_own(tmp_path, capsys):
    from dataflex_callbacks.integrations.verl.config import DYNAMIC_SAMPLING_REFUSAL

    path = tmp_path / "run.yaml"
    path.write_text(VERL_RUN + "dataflex:\n  strategy: dapo\n")
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.rstrip("\n").endswith(DYNAMIC_SAMPLING_REFUSAL)


def test_an_unknown_host_lists_the_hosts(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(GROUP_SELECT)
    with pytest.raises(SystemExit) as exited:
        main(["validate", str(path), "--host", "ppo"])
    assert exited.value.code == 2
    assert "trl, trl-rloo, lightning, verl" in capsys.readouterr().err.replace("'", "")


def test_a_file_checked_with_the_core_rules_says_so_in_a_whole_sentence(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(GROUP_SELECT)
    assert main(["validate", str(path)]) == 0
    note = capsys.readouterr().err.strip()
    assert note == (
        "checked with the core rules, which every host applies; --host {trl,trl-rloo,lightning,verl} checks "
        "with that host adapter's own rules too (the rules that need the trainer or its data run when training starts)"
    ), note
