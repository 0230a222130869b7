"""Register a ``cpu`` platform with verl so that its trainer, FSDP2 workers and vLLM rollout run without a GPU.

Loaded by verl itself, in the driver and in every Ray worker, through its external-module hook:
``VERL_USE_EXTERNAL_MODULES=cpu_platform`` (``verl/__init__.py:49`` imports each named module on
``import verl``), with this folder on ``PYTHONPATH``. ``VERL_PLATFORM=cpu`` then selects it
(``verl/plugin/platform/platform_manager.py:92``). Nothing in verl or vLLM is patched: the module
only adds a platform through verl's own registry.

Why each part exists (verl 0.9.1):

- ``communication_backend_name`` is ``gloo``: verl builds its process groups with
  ``get_nccl_backend()`` (``verl/utils/device.py``), and NCCL needs a GPU.
- ``device_module`` is `CpuDevice`, a ``torch.cpu`` stand-in that also answers the CUDA-style
  calls verl makes on ``get_torch_device()``: ``memory_reserved`` / ``memory_allocated``
  (``verl/utils/memory_utils.py:47``), ``empty_cache``, ``mem_get_info``, ``get_rng_state`` /
  ``set_rng_state`` / ``manual_seed`` (the FSDP engine saves and restores the device RNG around
  micro-batches and in checkpoints), ``ipc_collect``, ``set_per_process_memory_fraction``.
- ``ray_resource_name`` is ``GPU``: verl asks Ray for one "GPU" per worker, so the run starts Ray
  with a fake one (``+ray_kwargs.ray_init.num_gpus=1``); the worker still computes on the CPU.
- One adjustment outside verl's platform interface: verl's workers start their process group with
  ``backend=f"cpu:gloo,{device}:{backend}"`` (``verl/utils/distributed.py:89``), which on this
  platform reads ``cpu:gloo,cpu:gloo``, and torch refuses a device named twice ("Duplicate device
  type cpu"). `_init_process_group` lets exactly that string through as ``cpu:gloo`` (what it
  means) and leaves every other call to ``torch.distributed.init_process_group`` as it was.
- The FSDP engine is registered for the device ``cuda`` only, so the run also sets
  ``VERL_ENGINE_DEVICE=cuda`` (``verl/workers/engine/base.py:405``); the engine's tensors follow
  ``trainer.device=cpu``.
"""

from __future__ import annotations

import functools
import os
from contextlib import nullcontext
from types import ModuleType
from typing import Any

import torch
import torch.distributed
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


def _physical_memory() -> tuple[int, int]:
    """(available, total) bytes of this machine's RAM, what ``mem_get_info`` reports for a GPU."""
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


class CpuDevice(ModuleType):
    """``torch.cpu`` plus the ``torch.cuda`` calls verl makes through ``get_torch_device()``.

    CPU tensors have no caching allocator, so the memory counters report 0 and the cache calls do
    nothing; the RNG calls act on torch's (CPU) default generator, which is the one a CPU run uses.
    Anything else is looked up on ``torch.cpu``.
    """

    def __init__(self) -> None:
        super().__init__("verl_cpu_device")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch.cpu, name)

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        return "cpu"

    @staticmethod
    def set_device(device: Any) -> None:
        return None

    @staticmethod
    def get_device_name(device: Any = None) -> str:
        return "cpu"

    @staticmethod
    def empty_cache() -> None:
        return None

    @staticmethod
    def ipc_collect() -> None:
        return None

    @staticmethod
    def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
        return None

    @staticmethod
    def memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_reserved(device: Any = None) -> int:
        return 0

    @staticmethod
    def max_memory_allocated(device: Any = None) -> int:
        return 0

    @staticmethod
    def reset_peak_memory_stats(device: Any = None) -> None:
        return None

    @staticmethod
    def mem_get_info(device: Any = None) -> tuple[int, int]:
        return _physical_memory()

    @staticmethod
    def get_rng_state(device: Any = None) -> torch.Tensor:
        return torch.get_rng_state()

    @staticmethod
    def set_rng_state(state: torch.Tensor, device: Any = None) -> None:
        torch.set_rng_state(state)

    @staticmethod
    def manual_seed(seed: int) -> None:
        torch.manual_seed(seed)

    @staticmethod
    def manual_seed_all(seed: int) -> None:
        torch.manual_seed(seed)


def _dedupe_backend(init_process_group):
    """Wrap ``init_process_group`` so that verl's ``cpu:gloo,cpu:gloo`` (cpu named twice) reaches torch as
    ``cpu:gloo``.
    """

    @functools.wraps(init_process_group)
    def _init_process_group(*args, **kwargs):
        if kwargs.get("backend") == "cpu:gloo,cpu:gloo":
            kwargs["backend"] = "cpu:gloo"
        return init_process_group(*args, **kwargs)

    _init_process_group.dataflex_e2e_wrapped = True
    return _init_process_group


if not getattr(torch.distributed.init_process_group, "dataflex_e2e_wrapped", False):
    torch.distributed.init_process_group = _dedupe_backend(torch.distributed.init_process_group)


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """verl's platform interface answered by the CPU (see the module docstring for why each answer)."""

    def __init__(self) -> None:
        self._device = CpuDevice()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> ModuleType:
        return self._device

    def is_available(self) -> bool:
        return True

    def current_device(self) -> str:
        # "cpu", not an index: verl moves modules with ``.to(get_device_id())``
        # (verl/utils/fsdp_utils.py:507), and ``.to(0)`` means accelerator 0.
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    def nvtx_range(self, msg: str):
        return nullcontext()

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return ["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"]

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None
