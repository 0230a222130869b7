"""A tiny character-level causal LM for tests, examples and the `dataflex run` demo.

Everything is built locally (no download): a character-level tokenizer made with the
`tokenizers` library and a randomly initialised `Qwen2ForCausalLM` of about 80k parameters.
`transformers` and `tokenizers` are imported inside the functions, so the core package
imports without them.
"""

from __future__ import annotations

import os

PAD_TOKEN = "<pad>"
EOS_TOKEN = "<eos>"
BOS_TOKEN = "<bos>"
SPECIAL_TOKENS = (PAD_TOKEN, EOS_TOKEN, BOS_TOKEN)

# Every character the built-in task suite writes, plus a few spares for user prompts.
CHARACTERS = tuple("0123456789") + tuple("abcdefghijklmnopqrstuvwxyz") + tuple(" +-*=:?>#.,|")

# One message after another, no role markers: a chat prompt renders as its plain text, so
# conversational and plain-text datasets tokenize the same way.
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"

DEFAULT_MODEL_CONFIG = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    # Two heads of 32: vLLM's CPU attention accepts head sizes 32, 64, 80 and up, not 16.
    num_attention_heads=2,
    num_key_value_heads=2,
    max_position_embeddings=64,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    # Tied embeddings with a wide embedding init make the untrained model prefer to repeat
    # its last input character: that prior is what lets the suite's `echo` domain be solved
    # from the first step while the other domains must be learned.
    tie_word_embeddings=True,
    initializer_range=0.02,
    embedding_init_std=0.1,
    digit_embedding_init_std=0.03,  # weak digit echo: see tasks.domains
)


def build_tiny_tokenizer(
    characters=CHARACTERS,
    special_tokens=SPECIAL_TOKENS,
    chat_template=CHAT_TEMPLATE,
    model_max_length=DEFAULT_MODEL_CONFIG["max_position_embeddings"],
    unknown: str = "?",
    **token_roles,
):
    """Build the character-level tokenizer: one token per character, ids stable across calls.

    Returns a `transformers.PreTrainedTokenizerFast` with pad/eos/bos special tokens, left
    padding (what generation wants) and a minimal chat template. Its alphabet is `characters`
    (by default `CHARACTERS`: digits, lowercase letters and `` +-*=:?>#.,|``); text outside it is
    mapped, not dropped: an uppercase letter whose lowercase is in the alphabet becomes that
    lowercase letter, and any other character (newline, ``!``, ``é``, ...) becomes `unknown`, so
    ``"Hi, Bob!"`` is encoded as ``"hi, bob?"``: one token per character of the text. Special
    tokens are matched before the mapping. A tokenizer reloaded from `save_tiny`'s folder with
    ``AutoTokenizer`` is transformers' ``Qwen2Tokenizer``, which has no such mapping and drops
    characters outside the alphabet: pass text in the alphabet to it.

    The arguments build another tokenizer of this form (ChatML's in
    scripts/verl_e2e/make_assets.py): `special_tokens` take the first ids, then `characters`;
    `unknown` must be one of `characters`; `token_roles` (`pad_token=`, `eos_token=`, ...), when
    given, replace the pad/eos/bos roles.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from dataflex_callbacks.errors import ParamError

    if unknown not in characters:
        raise ParamError(
            f"build_tiny_tokenizer: unknown={unknown!r} is not in the alphabet {''.join(characters)!r}; "
            "it stands for every character outside it, so choose one of those characters",
            "unknown",
        )

    # Byte-level symbols (space is "Ġ") and a merge-free BPE: this is exactly the form
    # `AutoTokenizer` rebuilds for a saved qwen2 model (Qwen2Tokenizer), so a saved and
    # reloaded tokenizer splits and decodes text the same way as this one.
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    symbols = [byte_level.pre_tokenize_str(char)[0][0] for char in characters]
    vocab = {token: i for i, token in enumerate(list(special_tokens) + symbols)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False, byte_fallback=False))
    tokenizer.normalizer = _alphabet_mapping(characters, unknown, normalizers, Regex)
    tokenizer.pre_tokenizer = byte_level
    tokenizer.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        **(token_roles or dict(pad_token=PAD_TOKEN, eos_token=EOS_TOKEN, bos_token=BOS_TOKEN)),
        padding_side="left",
        clean_up_tokenization_spaces=False,
        model_max_length=model_max_length,
    )
    fast.chat_template = chat_template
    return fast


def _alphabet_mapping(characters, unknown: str, normalizers, Regex):
    """A `tokenizers` normalizer: uppercase letters to their lowercase where only that is in ``characters``,
    anything else outside them to ``unknown``."""
    alphabet = set(characters)
    steps = [
        normalizers.Replace(upper, upper.lower())
        for upper in sorted({c.upper() for c in alphabet})
        if upper not in alphabet and upper.lower() in alphabet and len(upper) == 1
    ]
    outside = "[^" + "".join("\\" + c if c in "\\]^-[" else c for c in sorted(alphabet)) + "]"
    steps.append(normalizers.Replace(Regex(outside), unknown))
    return normalizers.Sequence(steps)


def build_tiny_model(tokenizer, seed: int = 0, **config_overrides):
    """Build a randomly initialised tiny `Qwen2ForCausalLM` for `tokenizer` (same seed, same weights).

    Defaults: hidden 64, 2 layers, 2 heads of 32, MLP 128, tied embeddings (~80k parameters).
    Any `Qwen2Config` field can be overridden by keyword, plus `embedding_init_std` (std of
    the token embedding init; 0.1 by default).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    settings = dict(DEFAULT_MODEL_CONFIG)
    settings.update(config_overrides)
    embedding_init_std = float(settings.pop("embedding_init_std"))
    digit_embedding_init_std = float(settings.pop("digit_embedding_init_std"))
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        **settings,
    )
    # A local generator keeps the caller's global RNG untouched and the weights a function of `seed` only.
    generator = torch.Generator().manual_seed(int(seed))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        model = Qwen2ForCausalLM(config)
    with torch.no_grad():
        for name, param in sorted(model.named_parameters()):
            if name.endswith("embed_tokens.weight"):
                param.normal_(0.0, embedding_init_std, generator=generator)
                digit_ids = tokenizer.convert_tokens_to_ids(list("0123456789"))
                param[digit_ids] *= digit_embedding_init_std / embedding_init_std
            elif "norm" in name:
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                param.normal_(0.0, config.initializer_range, generator=generator)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def save_tiny(path: str | os.PathLike, seed: int = 0, **config_overrides) -> str:
    """Save the tiny tokenizer and model to `path`, loadable with `AutoModelForCausalLM.from_pretrained(path)`."""
    path = os.fspath(path)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer, seed=seed, **config_overrides)
    os.makedirs(path, exist_ok=True)
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return path
