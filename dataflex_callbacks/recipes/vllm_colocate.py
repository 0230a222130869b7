"""Generate with vLLM inside the training process (`dataflex run --use-vllm`): TRL's colocate mode, CPU-ready.

TRL's `GRPOTrainer` builds the engine itself (``use_vllm=True, vllm_mode="colocate"``) from the
model's folder (``model.name_or_path``) and pushes the trainer's weights into it before the first
generation of every optimizer step. On vLLM's CPU build four things are needed beyond that, which
`cpu_engine` and `colocate_config` provide:

* the engine's dtype: vLLM turns a float32 checkpoint into bfloat16 by default, so its sampling
  log-probs would differ from the trainer's float32 ones (and CPUs without bf16 units are ~50x slower);
* eager execution: otherwise vLLM's CPU backend compiles the model with inductor at start-up;
* weights TRL can update: on CPUs with AMX or AVX-512, vLLM's CPU linear layers repack their weights
  at load and drop the originals, so TRL's weight push fails (``'Parameter' object has no attribute
  'weight_loader'``); `cpu_engine` makes them multiply with the live weights instead
  (`dataflex_callbacks.recipes.vllm_cpu`, the fix the verl path uses too);
* a KV cache of a set size: on CPU, ``vllm_gpu_memory_utilization`` is a share of the RAM of the
  engine's NUMA node, out of which vLLM 0.32 first takes the whole process's resident memory (trainer
  included) and keeps the rest for the KV cache; the same share passes on one machine and leaves a
  negative KV cache on another (``requested memory for kv (-0.13/0.54 GiB)`` on a 2-core machine
  whose node 0 holds 10.7 of its 24 GiB). `CPU_ENGINE_SETTINGS` asks for `CPU_KV_CACHE_BYTES` instead.

`GRPOConfig` has no field for vLLM's dtype, eager mode or CPU kernels, hence the context manager.
`vllm` and `trl` are imported only when these functions run.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator

from dataflex_callbacks.recipes.vllm_cpu import keep_live_weights

SETUP_SCRIPT = "scripts/setup_vllm_env.sh"
CPU_MEMORY_SHARE = 0.05
"""`vllm_gpu_memory_utilization` on CPU: small, since `CPU_ENGINE_SETTINGS` sizes the KV cache itself."""
CPU_KV_CACHE_BYTES = 256 * 2**20
"""KV cache of the CPU engine: 256 MiB holds the tiny models' batches many times over; raise it for a real model."""
CPU_ENGINE_SETTINGS = {"dtype": "float32", "enforce_eager": True, "kv_cache_memory_bytes": CPU_KV_CACHE_BYTES}
"""vLLM engine arguments `GRPOConfig` cannot set: float32 like the trainer, no start-up compilation, a KV cache
of a set size (not a share of the machine's memory)."""


def check_vllm_importable(error: type = ImportError, flag: str = "--use-vllm") -> None:
    """Raise `error` in one line naming `scripts/setup_vllm_env.sh` when vLLM cannot be imported here."""
    try:
        import vllm  # noqa: F401
    except Exception as problem:  # ImportError, or a broken companion (torchvision beside a CPU torch)
        reason = " ".join(f"{type(problem).__name__}: {problem}".split())[:200]
        raise error(
            f"{flag} needs vLLM, which cannot be imported in this environment ({reason}); build one with "
            f"`bash {SETUP_SCRIPT}` (vLLM's CPU build, then run `.venv-vllm/bin/dataflex ...`), or "
            "`pip install vllm` on a GPU machine"
        ) from None


def colocate_config(on_cpu: bool, max_model_length: int | None = None) -> dict:
    """The `GRPOConfig` fields of vLLM colocate generation (CPU: a 5% RAM share for the engine).

    ``max_model_length``: prompt plus completion tokens the engine must hold (None: the model's own limit).
    """
    config = {"use_vllm": True, "vllm_mode": "colocate", "vllm_max_model_length": max_model_length}
    if on_cpu:
        config["vllm_gpu_memory_utilization"] = CPU_MEMORY_SHARE
    return config


@contextlib.contextmanager
def cpu_engine(**engine_arguments) -> Iterator[None]:
    """Build the trainer inside ``with cpu_engine():`` to give TRL's colocated vLLM engine CPU-ready settings.

    While open: the engine TRL constructs (``vllm.LLM`` in `trl.generation.vllm_generation`) also gets
    `CPU_ENGINE_SETTINGS` updated by ``engine_arguments``, and vLLM's CPU linear layers keep their weights
    (plain ``F.linear``) so that TRL's per-step weight push reaches them. Both are undone on exit; the
    engine built inside keeps its settings.
    """
    from trl.generation import vllm_generation

    settings = {**CPU_ENGINE_SETTINGS, **engine_arguments}
    original_llm = vllm_generation.LLM

    @functools.wraps(original_llm)
    def build(*args, **kwargs):
        return original_llm(*args, **{**kwargs, **settings})

    vllm_generation.LLM = build
    restore_dispatch = keep_live_weights()
    try:
        yield
    finally:
        vllm_generation.LLM = original_llm
        restore_dispatch()


def in_process_engine() -> None:
    """Keep vLLM's engine in this process (TRL's colocate weight push reaches into it), unless the user chose."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def save_for_engine(model, tokenizer, folder: str) -> str:
    """Save a model built in memory to `folder` and point ``model.name_or_path`` at it: the folder vLLM starts from.

    TRL overwrites the engine's weights with the trainer's before the first generation, so only the
    architecture and tokenizer of this copy matter.
    """
    os.makedirs(folder, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    model.name_or_path = folder
    model.config._name_or_path = folder
    return folder
