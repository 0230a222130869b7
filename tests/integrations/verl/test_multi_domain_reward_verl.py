"""The multi-domain reward through verl's own reward loading: ``reward.custom_reward_function`` + naive manager.

verl imports the file named by ``reward.custom_reward_function.path``, wraps ``name`` with
``reward_kwargs`` (`get_custom_reward_fn`) and calls it from its reward manager with the decoded
response, ``data_source``, ``reward_model.ground_truth`` and ``extra_info`` of each row.
"""

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl.sh (uses .venv-verl)")

import asyncio  # noqa: E402
import string  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from test_trainer_transfer_queue import verl_config  # noqa: E402

import dataflex_callbacks.recipes.tasks.multi_domain_reward as multi_domain_reward  # noqa: E402

KK_TRUTH = "Michael is a knight, Zoey is a knave, and Ethan is a knight."
ROWS = [  # (data_source, response, ground truth, expected score)
    ("math_dapo", "48 + 24 = 72.\nAnswer: 72", "72", 1.0),
    ("openai/gsm8k", "So \\boxed{71}.", "72", 0.0),
    ("kk_logic", "Final answer: Michael is a knight, Zoey is a knave, and Ethan is a knight.", KK_TRUTH, 1.0),
    ("kk_logic", "Final answer: Michael is a knight, Zoey is a knight, and Ethan is a knight.", KK_TRUTH, 0.0),
    ("sciq", "ATP is made there, so the answer is (B).", "B", 1.0),
    ("sciq", "A cell is the unit of life.", "B", 0.0),
    ("my_source", "Answer: 3", "3", 1.0),  # routed by reward_kwargs
    # Answers as people write them (tests/recipes/tasks/test_written_answers.py has the full tables).
    ("openai/gsm8k", "#### 1e3", "1000", 1.0),
    ("openai/gsm8k", "The answer is 1e3", "1000", 0.0),  # prose: only with reward_kwargs.free_text=true
    ("lighteval/MATH", "So \\boxed{x=4}", "\\boxed{4}", 1.0),
    ("TIGER-Lab/MMLU-Pro", "answer: b", "B", 1.0),
    ("TIGER-Lab/MMLU-Pro", "The answer is (F).", "F", 1.0),
    (
        "kk_logic",
        "<answer>(1) zoey is a knave (2) oliver is a knight</answer>",
        "(1) Zoey is a knave\n(2) Oliver is a knight",
        1.0,
    ),
    ("sciq", "The answer is B.", "K", 0.0),  # an impossible reference scores 0 (one warning), never raises
]


def ascii_tokenizer():
    """A real byte-level fast tokenizer over printable ASCII (the tiny test tokenizer has no capitals)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    symbols = sorted({byte_level.pre_tokenize_str(c)[0][0] for c in string.printable})
    vocab = {token: i for i, token in enumerate(["<pad>", "<eos>"] + symbols)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    tokenizer.pre_tokenizer, tokenizer.decoder = byte_level, decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", eos_token="<eos>")


def row(tokenizer, data_source, response, ground_truth):
    from verl import DataProto

    prompt = torch.tensor([tokenizer.encode("Q: ?")])
    ids = tokenizer.encode(response)
    assert tokenizer.decode(ids) == response
    responses = torch.tensor([ids + [tokenizer.pad_token_id] * 3])  # right padding, as verl's
    attention = torch.cat([torch.ones_like(prompt), torch.tensor([[1] * len(ids) + [0] * 3])], dim=1)
    return DataProto.from_dict(
        tensors={"prompts": prompt, "responses": responses, "attention_mask": attention},
        non_tensors={
            "data_source": np.array([data_source], dtype=object),
            "reward_model": np.array([{"ground_truth": ground_truth, "style": "rule"}], dtype=object),
            "extra_info": np.array([{"index": 0}], dtype=object),
        },
    )


@pytest.mark.parametrize(
    "path", ["pkg://dataflex_callbacks.recipes.tasks.multi_domain_reward", multi_domain_reward.__file__]
)
def test_compute_score_through_verls_reward_manager(path):
    from verl.trainer.ppo.reward import load_reward_manager

    config = verl_config(
        f"reward.custom_reward_function.path={path}",
        "reward.custom_reward_function.name=compute_score",
        "+reward.custom_reward_function.reward_kwargs.routes={my_source:math}",
    )
    tokenizer = ascii_tokenizer()
    manager = load_reward_manager(config, tokenizer)

    async def score_all():
        manager.loop = asyncio.get_running_loop()
        return [
            await manager.run_single(row(tokenizer, source, response, truth)) for source, response, truth, _ in ROWS
        ]

    results = asyncio.run(score_all())
    assert [r["reward_score"] for r in results] == [expected for *_, expected in ROWS]
