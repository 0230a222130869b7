"""Build what a CPU run of verl's ``main_ppo`` reads: a tiny Qwen2 model folder and a two-domain parquet dataset.

Usage: ``python make_assets.py OUT_DIR`` writes ``OUT_DIR/model`` (config, weights, tokenizer) and
``OUT_DIR/train.parquet`` / ``OUT_DIR/val.parquet``; nothing is downloaded. Same call, same bytes
(seeded), so a cached folder can be reused.

What the model needs and why:

- a head size of 32 (hidden 64, 2 heads): vLLM's CPU attention kernels accept head sizes of 32
  and up only;
- a tokenizer in which ``"\n"`` and ``<|im_end|>`` are single tokens: verl picks its Qwen chat
  handling from ``model_type=qwen2`` and refuses anything else ("Expected Qwen newline to
  tokenize to one token", ``verl/utils/tokenizer/continuous_token.py:558``), so the vocabulary
  holds the ChatML markers and the chat template writes ChatML;
- ``eos`` is ``<|im_end|>``, where a ChatML turn ends and where vLLM stops a response.

The dataset is verl's RLHF layout (``data_source``, chat ``prompt``, ``ability``,
``reward_model.ground_truth``, ``extra_info.index``), with two ``data_source`` domains, ``easy``
and ``hard``, for the mixing strategies; ``extra_info.index`` is unique per row, as
``pre_select`` needs. Rewards come from ``reward.py`` next to this file.
"""

from __future__ import annotations

import os
import sys

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHARACTERS = tuple("0123456789") + tuple("abcdefghijklmnopqrstuvwxyz") + tuple(" +-*=:?>#.,|\n")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# hidden 64 / 2 heads = head size 32, the smallest vLLM's CPU attention takes.
MODEL_CONFIG = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=2,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
DOMAINS = ("easy", "hard")
TRAIN_ROWS_PER_DOMAIN = 32
VAL_ROWS_PER_DOMAIN = 4


def build_tokenizer():
    """The project's character tokenizer (one token per character, "\n" included) with the ChatML special tokens."""
    from dataflex_callbacks.recipes.tiny_model import build_tiny_tokenizer

    return build_tiny_tokenizer(
        characters=CHARACTERS,
        special_tokens=SPECIALS,
        chat_template=CHAT_TEMPLATE,
        model_max_length=MODEL_CONFIG["max_position_embeddings"],
        pad_token="<|endoftext|>",
        eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
    )


def build_model(tokenizer, seed: int = 0):
    """The project's tiny Qwen2 (random weights, seeded) with this tokenizer and a head size of 32."""
    from dataflex_callbacks.recipes.tiny_model import build_tiny_model

    model = build_tiny_model(tokenizer, seed=seed, **MODEL_CONFIG)
    model.config.bos_token_id = None  # ChatML has no BOS token: nothing may be prepended to a prompt
    model.generation_config.bos_token_id = None
    return model


def rows(domain: str, count: int, split: str, start: int) -> list[dict]:
    """``count`` prompts of ``domain`` in verl's RLHF layout; ``extra_info.index`` runs from ``start``."""
    out = []
    for i in range(count):
        a, b = (7 * i + 3) % 10, (3 * i + 1) % 10
        question = f"{a} + {b} = ?" if domain == "easy" else f"{a} * {b} + {a} = ?"
        answer = a + b if domain == "easy" else a * b + a
        out.append(
            {
                "data_source": domain,
                "prompt": [{"role": "user", "content": question}],
                "ability": "math",
                "reward_model": {"style": "rule", "ground_truth": str(answer)},
                "extra_info": {"index": start + i, "split": split},
            }
        )
    return out


def write_dataset(out_dir: str) -> None:
    import pandas as pd

    train, val = [], []
    for d, domain in enumerate(DOMAINS):
        train += rows(domain, TRAIN_ROWS_PER_DOMAIN, "train", start=d * 1000)
        val += rows(domain, VAL_ROWS_PER_DOMAIN, "test", start=d * 1000 + 500)
    pd.DataFrame(train).to_parquet(os.path.join(out_dir, "train.parquet"))
    pd.DataFrame(val).to_parquet(os.path.join(out_dir, "val.parquet"))


def main(out_dir: str) -> None:
    os.makedirs(os.path.join(out_dir, "model"), exist_ok=True)
    tokenizer = build_tokenizer()
    for text in ("\n", "<|im_end|>"):
        ids = tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise SystemExit(f"make_assets: {text!r} must be one token for verl's Qwen handling, got {ids}")
    model = build_model(tokenizer)
    tokenizer.save_pretrained(os.path.join(out_dir, "model"))
    model.save_pretrained(os.path.join(out_dir, "model"))
    write_dataset(out_dir)
    print(f"make_assets: model ({sum(p.numel() for p in model.parameters())} parameters) and data in {out_dir}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python make_assets.py OUT_DIR")
    main(sys.argv[1])
