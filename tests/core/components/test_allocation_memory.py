"""What an allocator keeps across steps (components/allocation_memory.py): a damaged saved copy names its field."""

import pytest
import torch

from dataflex_callbacks.components.allocation_memory import PassHistory, ResponseBank
from dataflex_callbacks.errors import StateError


def bank_state():
    bank = ResponseBank()
    bank.store(["a", "b"], [torch.tensor([1, 2]), torch.tensor([3])], [1.0, 0.9])
    return bank.state_dict()


@pytest.mark.parametrize(
    "field, value, fragment",
    [
        ("keys", None, "'keys' must be a list"),
        ("responses", [torch.tensor([1])], "'responses' must be 2 tensors, one per key"),
        ("responses", [[1, 2], [3]], "'responses' must be 2 tensors"),
        ("rewards", [1.0], "'rewards' must be 2 finite numbers"),
        ("rewards", [1.0, "high"], "'rewards' must be 2 finite numbers"),
    ],
)
def test_a_damaged_response_bank_names_its_field(field, value, fragment):
    state = {**bank_state(), field: value}
    with pytest.raises(StateError, match="ResponseBank state") as error:
        ResponseBank().load_state_dict(state)
    assert fragment in str(error.value)


def test_a_response_bank_round_trips_and_refuses_a_state_without_its_keys():
    restored = ResponseBank()
    restored.load_state_dict(bank_state())
    assert torch.equal(restored.get("b")[0], torch.tensor([3])) and restored.get("a")[1] == 1.0
    with pytest.raises(StateError, match=r"lacks key\(s\) \['rewards'\]"):
        ResponseBank().load_state_dict({"keys": [], "responses": []})


def test_a_damaged_pass_history_names_its_field():
    history = PassHistory()
    history.record(["a", "b"], ["x", "x"], torch.tensor([1.0, 2.0]), torch.tensor([2.0, 2.0]))
    state = history.state_dict()
    with pytest.raises(StateError, match=r"'counts' must be a tensor of shape \(2, 2\)"):
        PassHistory().load_state_dict({**state, "counts": [[1, 1], [2, 0]]})
    with pytest.raises(StateError, match="'domains' must be a dict"):
        PassHistory().load_state_dict({**state, "domains": ["x"]})
    restored = PassHistory()
    restored.load_state_dict(state)
    assert restored.state_dict()["domains"] == state["domains"]
