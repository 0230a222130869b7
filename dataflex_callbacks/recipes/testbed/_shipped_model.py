"""The testbed's shipped pretrained model: where its folder is, and the error when its weights are missing."""

from __future__ import annotations

import os

from dataflex_callbacks.errors import InputError

MODEL_FOLDER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model")


class TestbedModelMissing(InputError, FileNotFoundError):
    """The shipped testbed model's weights are not in the package folder."""


def load_testbed_model_path() -> str:
    """The folder of the shipped pretrained model, for ``from_pretrained`` or ``dataflex run --model``.

    Raises `TestbedModelMissing` (a `DataFlexError` and `FileNotFoundError`) naming the rebuild command when
    the weights are missing (a source checkout without them).
    """
    if not os.path.isfile(os.path.join(MODEL_FOLDER, "model.safetensors")):
        raise TestbedModelMissing(
            f"the testbed model is not in {MODEL_FOLDER}; rebuild it with "
            "`python scripts/build_testbed_model.py` (about 8 minutes on a CPU)"
        )
    return MODEL_FOLDER
