"""The core tests' device: ``DATAFLEX_TEST_DEVICE=cuda pytest tests/core`` builds the tests' tensors on CUDA.

Unset (the default), nothing changes: every tensor is built on the CPU. Set (``cpu`` too), every tensor
factory called from a file in this folder or below it (the tests and their references, never the package) without
a ``device=`` gets that device (`TensorsOnDevice`, entered by conftest.py for the session), so the
package receives device tensors exactly as a host passes them and its own constructors behave as in
production. A factory given a CPU ``torch.Generator`` draws on the CPU and moves the result, so a seed
gives the same values on every device. scripts/gpu_check.sh runs these tests on a GPU.
"""

import os
import sys

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._device import _device_constructors

ENVIRONMENT_VARIABLE = "DATAFLEX_TEST_DEVICE"
_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_THIS = os.path.abspath(__file__)
_TORCH = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep


def device_from_environment() -> torch.device | None:
    """The device ``DATAFLEX_TEST_DEVICE`` names, or None when unset; a ValueError naming the fix when absent."""
    name = os.environ.get(ENVIRONMENT_VARIABLE)
    if not name:
        return None
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"{ENVIRONMENT_VARIABLE}={name} but this torch ({torch.__version__}) sees no CUDA device; "
            "unset it or run on a GPU machine"
        )
    return device


class TensorsOnDevice(TorchFunctionMode):
    """Give ``device`` to tensor factories called from files under this folder (the caller's frame decides)."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device = torch.device(device)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _device_constructors() and kwargs.get("device") is None and _called_from_tests():
            generator = kwargs.get("generator")
            if generator is not None and generator.device.type != self.device.type:
                return func(*args, **kwargs).to(self.device)
            kwargs["device"] = self.device
        return func(*args, **kwargs)


def _called_from_tests() -> bool:
    frame = sys._getframe(1)
    # Neither torch's own Python wrappers nor this file (a mode nested in another) is the caller.
    while frame is not None and (frame.f_code.co_filename.startswith(_TORCH) or frame.f_code.co_filename == _THIS):
        frame = frame.f_back
    return frame is not None and frame.f_code.co_filename.startswith(_HERE)
