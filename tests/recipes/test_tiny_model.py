"""The built-in tiny model and tokenizer: local, deterministic, reloadable with from_pretrained."""

import pytest
import torch

pytest.importorskip("transformers")

from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer, save_tiny  # noqa: E402


def test_tokenizer_round_trips_characters():
    tokenizer = build_tiny_tokenizer()
    text = "echo q k d 3 8 5:"
    ids = tokenizer(text)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tokenizer.decode(ids) == text
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    assert tokenizer.padding_side == "left"
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "echo 1"}], tokenize=False, add_generation_prompt=True
    )
    assert rendered == "echo 1"


def test_model_is_tiny_and_seeded():
    tokenizer = build_tiny_tokenizer()
    first, again, other = (build_tiny_model(tokenizer, seed=s) for s in (0, 0, 1))
    assert 10_000 < sum(p.numel() for p in first.parameters()) < 200_000
    assert all(torch.equal(a, b) for a, b in zip(first.parameters(), again.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first.parameters(), other.parameters(), strict=True))
    assert build_tiny_model(tokenizer, num_hidden_layers=1).config.num_hidden_layers == 1


def test_untrained_model_repeats_letters_not_digits():
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(tokenizer)
    batch = tokenizer(["echo q k d", "echo 3 8 5"], return_tensors="pt", padding=True)
    with torch.no_grad():
        probs = model(**batch).logits[:, -1].softmax(-1)
    assert probs[0, tokenizer.convert_tokens_to_ids("d")] > 0.5
    assert probs[1, tokenizer.convert_tokens_to_ids("5")] < 0.5


def test_save_and_reload(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    save_tiny(tmp_path, seed=3)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path)
    reference = build_tiny_model(build_tiny_tokenizer(), seed=3)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), reference.parameters(), strict=True))
    text = "code 1 2 3: abc"
    assert tokenizer(text)["input_ids"] == build_tiny_tokenizer()(text)["input_ids"]
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_text_outside_the_alphabet_is_mapped_not_dropped():
    tokenizer = build_tiny_tokenizer()
    text = "Hi, Bob! é\n"
    ids = tokenizer(text)["input_ids"]
    assert len(ids) == len(text)  # one token per character, none dropped
    assert tokenizer.decode(ids) == "hi, bob? ??"  # uppercase to lowercase, anything else to '?'
    assert tokenizer("<eos>A")["input_ids"] == [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("a")]


def test_an_unknown_character_outside_the_alphabet_is_refused():
    from dataflex_callbacks.errors import DataFlexError

    with pytest.raises(DataFlexError, match="unknown='!' is not in the alphabet"):
        build_tiny_tokenizer(unknown="!")
