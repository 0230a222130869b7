"""The core tests' device (``DATAFLEX_TEST_DEVICE``, default: the CPU, untouched): see device_tensors.py."""

import pytest
import torch
from device_tensors import TensorsOnDevice, device_from_environment


def _chosen_device() -> torch.device | None:
    try:
        return device_from_environment()
    except ValueError as error:
        pytest.exit(str(error), returncode=4)


@pytest.fixture(scope="session")
def tensor_device() -> torch.device:
    """The device the core tests build their tensors on (``DATAFLEX_TEST_DEVICE``, default ``cpu``)."""
    return _chosen_device() or torch.device("cpu")


@pytest.fixture(scope="session", autouse=True)
def _tensors_on_test_device():
    chosen = _chosen_device()
    if chosen is None:
        yield
        return
    with TensorsOnDevice(chosen):  # DATAFLEX_TEST_DEVICE=cpu too: the CPU run exercises this path
        yield
