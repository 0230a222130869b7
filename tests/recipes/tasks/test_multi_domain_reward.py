"""The multi-domain reward: hand-written answers per family, routing, TRL and verl entry points."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataflex_callbacks.recipes.tasks.multi_domain_reward import (
    FAMILIES,
    MultiDomainReward,
    chosen_letter,
    claimed_roles,
    compute_score,
    score_knights_knaves,
    score_math,
    score_multiple_choice,
    task_family,
)

# ------------------------------------------------------------------ math

MATH = [
    # (completion, ground truth, expected)
    ("Natalia sold 48 + 24 = 72 clips.\nAnswer: 72", "72", 1.0),  # the DAPO-style "Answer:" line
    ("So the total is \\boxed{1,000}.", "1000", 1.0),
    ("48/2 = 24 ... #### 72", "Natalia sold 48/2 = 24 clips in May.\n#### 72", 1.0),  # GSM8K reference
    ("The probability is \\boxed{\\frac{1}{2}}", "0.5", 1.0),
    ("Answer: 72.0", "72", 1.0),
    ("Answer: 0.30000000000000004", "0.3", 1.0),  # float noise is not an error
    ("Answer: 1000001", "1000000", 0.0),  # but an off-by-one on a large number is
    ("Answer: 71", "72", 0.0),  # wrong
    ("\\boxed{73} ... earlier I wrote 72", "72", 0.0),  # the box wins over a later stray number
    ("I cannot solve this.", "72", 0.0),  # malformed: no number
    ("The answer is \\boxed{72", "72", 0.0),  # malformed: a truncated box is not an answer
    ("", "72", 0.0),
    # issue 32's false positives: each class must score 0
    ("<answer>7</answer> Check with 5.", "5", 0.0),  # the answer block, not the last number
    ("The answer is not 5, it is 7.", "5", 0.0),  # a negated value
    ("\\boxed{x=2 \\text{ or } x=-2}", "-2", 0.0),  # a hedge
    ("\\boxed{5 \\text{ m}}", "5 km", 0.0),  # another unit
    ("\\boxed{2+2=5}", "5", 0.0),  # an equation in a box is not its last side
    ("0.5\\%", "0.5", 0.0),  # a percent against a plain number
    # issue 32's misses: each must score 1
    ("<answer>\\frac{1}{2}</answer>", "0.5", 1.0),
    ("Answer: **18**", "18", 1.0),
    ("Final Answer: The final answer is $(1,2)$. I hope it is correct.", "(1,2)", 1.0),  # Minerva's template: a slot
]


@pytest.mark.parametrize("completion, truth, expected", MATH)
def test_math_answers(completion, truth, expected):
    assert score_math(completion, truth) == expected


def test_prose_answers_score_only_in_the_opt_in_free_text_mode():
    assert score_math("Reasoning ... Answer: 72", "72") == 0.0  # "Answer:" inside a sentence
    assert score_math("Reasoning ... Answer: 72", "72", free_text=True) == 1.0


@settings(max_examples=50, deadline=None)
@given(st.integers(-(10**9), 10**9))
def test_math_integer_answers_by_value(n):
    assert score_math(f"Reasoning ...\nAnswer: {n:,}", str(n)) == 1.0
    assert score_math(f"Reasoning ...\nAnswer: {n + 1}", str(n)) == 0.0


# ------------------------------------------------------------------ Knights and Knaves

KK_TRUTH = "Michael is a knight, Zoey is a knave, and Ethan is a knight."
KK = [
    (
        "Assume Michael is a knave; then Zoey ... contradiction. So Michael is a knight.\n"
        "Final answer: Michael is a knight, Zoey is a knave, and Ethan is a knight.",
        1.0,
    ),
    ("<answer>(1) Michael is a knight\n(2) Zoey is a knave\n(3) Ethan is a knight</answer>", 1.0),
    ("Therefore, Michael and Ethan are knights, and Zoey is not a knight.", 1.0),  # plural and negation
    ("Therefore Michael is a Knight, Zoey is a Knave, Ethan is a Knight.", 1.0),  # capitalised roles
    ("Final answer: Michael is a knight, Zoey is a knave, therefore Ethan is a knight.", 1.0),  # weaker marker inside
    ("Final answer: Michael is a knight, Zoey is a knight, and Ethan is a knight.", 0.0),  # Zoey wrong
    ("Final answer: Michael is a knight and Zoey is a knave.", 0.0),  # Ethan missing
    ("Final answer: Zoey is a knight or Zoey is a knave; Michael is a knight, Ethan is a knight.", 0.0),  # hedged
    ("Michael is a knight, Zoey is a knave or a knight, Ethan is a knight", 0.0),  # hedged role, no marker
    ("Final answer: Michael is a knight, Zoey is either a knave or a knight, Ethan is a knight.", 0.0),
    ("Michael is a knight, Ethan is a knight, Ethan or Zoey is a knave.", 0.0),  # hedged subject
    ("Zoey is a knight. No: Zoey isn't a knight. Michael is a knight. Ethan is a knight.", 1.0),  # "isn't" negates
    ("I am not sure who is who.", 0.0),  # malformed: no claim at all
    ("", 0.0),
]


@pytest.mark.parametrize("completion, expected", KK)
def test_knights_and_knaves_answers(completion, expected):
    assert score_knights_knaves(completion, KK_TRUTH) == expected


def test_kk_hedge_of_issue_32_scores_zero():
    """The docstring of `claimed_roles` calls this a hedge; it scored 1.0 at fcff4c0."""
    assert (
        score_knights_knaves("Zoey is a knight or a knave, Ethan is a knave", "Zoey is a knight, and Ethan is a knave.")
        == 0.0
    )


def test_kk_reasoning_hypotheses_do_not_count_when_a_final_answer_exists():
    completion = (
        "Suppose Zoey is a knight. Then Ethan is a knave, which contradicts his statement.\n"
        "Therefore: Michael is a knight, Zoey is a knave, Ethan is a knight."
    )
    assert claimed_roles(completion, ["michael", "zoey", "ethan"]) == {
        "michael": "knight",
        "zoey": "knave",
        "ethan": "knight",
    }
    # Without a marker, the last claim about each person counts.
    assert (
        score_knights_knaves("Zoey is a knight? No: Zoey is a knave. Michael is a knight. Ethan is a knight.", KK_TRUTH)
        == 1.0
    )


def test_kk_reference_as_mapping_and_bad_reference():
    assert score_knights_knaves("Final answer: A is a knight, B is a knave.", {"A": True, "B": "knave"}) == 1.0
    with pytest.raises(ValueError, match="assigns no roles"):
        score_knights_knaves("Michael is a knight", "no roles here")
    with pytest.raises(ValueError, match="'villain'"):
        score_knights_knaves("Michael is a knight", {"Michael": "villain"})


NAMES = ["Zoey", "Ethan", "Michael", "Olivia", "Lily", "Noah", "Ava", "Liam"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=2, max_size=8), st.data())
def test_kk_stated_truth_scores_one_and_any_flip_scores_zero(roles, data):
    people = NAMES[: len(roles)]

    def sentence(values):
        parts = [f"{p} is a {'knight' if v else 'knave'}" for p, v in zip(people, values, strict=True)]
        return ", ".join(parts[:-1]) + f", and {parts[-1]}."

    truth = sentence(roles)
    assert score_knights_knaves(f"Reasoning...\nFinal answer: {truth}", truth) == 1.0
    flip = data.draw(st.integers(0, len(roles) - 1))
    wrong = [(not v) if i == flip else v for i, v in enumerate(roles)]
    assert score_knights_knaves(f"Reasoning...\nFinal answer: {sentence(wrong)}", truth) == 0.0


# ------------------------------------------------------------------ multiple choice

MCQ = [
    ("The mitochondria makes ATP, so the answer is B.", "B", 1.0),
    ("Answer: (C)", "C", 1.0),
    ("**Final answer: D**", "D", 1.0),
    ("\\boxed{A}", "A", 1.0),
    ("E", "E", 1.0),
    ("C. Photosynthesis", "C", 1.0),
    ("Options (A) and (B) are wrong, so (D).", "D", 1.0),
    ("The answer is B.", "(b)", 1.0),  # reference written as "(b)"
    ("The answer is B. Option A is wrong because it ignores ATP.", "B", 1.0),  # "answer" beats "option"
    ("The answer is A.", "B", 0.0),  # wrong
    ("A cell is the basic unit of life.", "A", 0.0),  # malformed: the article "A" is not a choice
    ("I don't know.", "A", 0.0),
    ("The answer is A or B.", "A", 0.0),  # hedges pick no letter
    ("The answer is A/B.", "A", 0.0),
    ("The answer is (A) and (B).", "A", 0.0),
    ("<answer>A or B</answer>", "A", 0.0),
    ("\\boxed{A \\text{ or } B}", "A", 0.0),
    ("(A) or (B)", "A", 0.0),
    ("\\boxed{\\text{B}}", "B", 1.0),  # a letter in a LaTeX text wrapper
    ("**B**", "B", 1.0),  # a bare letter in markdown emphasis
]


@pytest.mark.parametrize("completion, truth, expected", MCQ)
def test_multiple_choice_answers(completion, truth, expected):
    assert score_multiple_choice(completion, truth) == expected


def test_multiple_choice_bad_reference_is_named():
    with pytest.raises(ValueError, match="'Mitochondria' is not an option letter"):
        score_multiple_choice("B", "Mitochondria")
    assert chosen_letter("The answer is K.") is None  # outside A-J
    assert chosen_letter("The answer is F.", choices="ABCD") is None  # outside the question's options


# ------------------------------------------------------------------ routing


@pytest.mark.parametrize(
    "label, family",
    [
        ("math_dapo", "math"),
        ("openai/gsm8k", "math"),
        ("gsm8k_short", "math"),
        ("gsm8k_long", "math"),
        ("kk_logic", "knights_knaves"),
        ("logic", "knights_knaves"),
        ("knights-and-knaves", "knights_knaves"),
        ("sciq", "multiple_choice"),
        ("science", "multiple_choice"),
        ("Idavidrein/gpqa", "multiple_choice"),
    ],
)
def test_routing_of_known_labels(label, family):
    assert task_family(label) == family


def test_unknown_and_ambiguous_labels_list_the_families():
    with pytest.raises(ValueError, match="cannot route domain 'poetry'.*math, knights_knaves, multiple_choice"):
        task_family("poetry")
    with pytest.raises(ValueError, match="several families"):
        task_family("math_mcq")
    assert task_family("poetry", routes={"poetry": "multiple_choice"}) == "multiple_choice"
    with pytest.raises(ValueError, match="unknown task family 'essay'"):
        MultiDomainReward(routes={"poetry": "essay"})


# ------------------------------------------------------------------ verl entry point


def test_verl_compute_score_routes_by_data_source():
    assert compute_score("math_dapo", "Answer: 72", "72") == 1.0
    assert compute_score("math_dapo", "The answer is 72", "72") == 0.0  # prose: only with free_text=True
    assert compute_score("math_dapo", "The answer is 72", "72", free_text=True) == 1.0
    assert (
        compute_score(
            "kk_logic",
            "Final answer: Michael is a knight, Zoey is a knave, Ethan is a knight.",
            KK_TRUTH,
            extra_info={"n_people": 3},
        )
        == 1.0
    )
    assert compute_score("sciq", "The answer is C.", "B") == 0.0
    # an unknown data_source falls back to extra_info["domain"], then to a clear error
    assert compute_score("my_source", "Answer: 3", "3", extra_info={"domain": "math"}) == 1.0
    with pytest.raises(ValueError, match="cannot route domain 'my_source'"):
        compute_score("my_source", "Answer: 3", "3", extra_info={})
    assert compute_score("my_source", "Answer: 3", "3", routes={"my_source": "math"}) == 1.0


# ------------------------------------------------------------------ TRL entry point


def test_trl_reward_reads_columns_and_conversations():
    reward = MultiDomainReward()
    completions = [
        [{"role": "assistant", "content": "Answer: 72"}],
        [{"role": "assistant", "content": "Final answer: Michael is a knight, Zoey is a knave, Ethan is a knight."}],
        [{"role": "assistant", "content": "The answer is A."}],
        [{"role": "assistant", "content": "no idea"}],
    ]
    prompts = [[{"role": "user", "content": "q"}]] * 4
    # verl's parquet layout as TRL passes it: data_source, domain, reward_model={"ground_truth": ...}
    columns = dict(
        data_source=["math_dapo", "kk_logic", "sciq", "sciq"],
        domain=["math", "logic", "science", "science"],
        reward_model=[{"style": "rule", "ground_truth": g} for g in ("72", KK_TRUTH, "B", "B")],
    )
    logged = {}
    rewards = reward(prompts, completions, log_metric=lambda k, v: logged.__setitem__(k, v), **columns)
    assert rewards == [1.0, 1.0, 0.0, 0.0]
    assert logged == {"multi_domain/knights_knaves": 1.0, "multi_domain/math": 1.0, "multi_domain/multiple_choice": 0.0}
    # routing by the domain column and a plain answer column
    by_domain = MultiDomainReward(label_key="domain")
    assert by_domain(
        prompts,
        ["Answer: 72", "x", "B", "x"],
        domain=["math", "logic", "science", "science"],
        answer=["72", KK_TRUTH, "B", "C"],
    ) == [1.0, 0.0, 1.0, 0.0]


def test_trl_reward_names_a_missing_column():
    with pytest.raises(ValueError, match="needs the reference column"):
        MultiDomainReward()(["q"], ["Answer: 1"], data_source=["math"])
    with pytest.raises(ValueError, match="needs the label column 'topic'"):
        MultiDomainReward(label_key="topic")(["q"], ["Answer: 1"], answer=["1"])


def test_families_are_the_three_documented():
    assert FAMILIES == ("math", "knights_knaves", "multiple_choice")


def test_as_reward_function_of_a_real_grpo_trainer(tmp_path):
    """One GRPO step on the tiny model, the reward reading a mixed-domain dataset's columns."""
    pytest.importorskip("trl")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer

    calls = []

    class Recording(MultiDomainReward):
        def __call__(self, prompts, completions, **kwargs):
            rewards = super().__call__(prompts, completions, **kwargs)
            calls.append((list(kwargs["data_source"]), rewards))
            return rewards

    dataset = Dataset.from_dict(
        {
            "prompt": ["1+1=", "Who is a knight?", "Pick A-D:", "2+2="],
            "data_source": ["openai/gsm8k", "kk_logic", "sciq", "math_dapo"],
            "domain": ["gsm8k_short", "logic", "science", "gsm8k_long"],
            "reward_model": [{"ground_truth": g} for g in ("2", "Ann is a knight.", "C", "4")],
        }
    )
    tokenizer = build_tiny_tokenizer()
    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_completion_length=4,
        max_steps=1,
        learning_rate=1e-3,
        seed=0,
        logging_steps=1,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        bf16=False,
        disable_tqdm=True,
    )
    trainer = GRPOTrainer(
        model=build_tiny_model(tokenizer, seed=0),
        reward_funcs=[Recording()],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    assert calls and all(len(sources) == len(rewards) == 4 for sources, rewards in calls)
    assert {s for sources, _ in calls for s in sources} <= set(dataset["data_source"])
    assert all(r in (0.0, 1.0) for _, rewards in calls for r in rewards)
    logged = [k for entry in trainer.state.log_history for k in entry]
    assert any(k.startswith("rewards/multi_domain_reward") for k in logged)
