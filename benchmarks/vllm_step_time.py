"""Per-step time of the default `dataflex run` suite with HF generate and with vLLM colocate, side by side.

    .venv-vllm/bin/python benchmarks/vllm_step_time.py --steps 20

Both runs use the same options (built-in tiny model and task suite, default strategy) in one process,
HF generate first; the table gives the median and mean wall time of an optimizer step (generation,
scoring, loss, update) over the steps after the first (the first vLLM step includes the engine's
warm-up), and the held-out accuracy after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--strategy", default="diffband")
    flags = parser.parse_args()

    import time

    import torch
    from transformers import TrainerCallback

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds, self._start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self._start)

    from dataflex_callbacks.recipes.options import RunOptions
    from dataflex_callbacks.recipes.runner import run_training

    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for use_vllm in (False, True):
            options = RunOptions(
                strategy=flags.strategy,
                steps=flags.steps,
                use_vllm=use_vllm,
                progress=False,
                output_dir=os.path.join(folder, "vllm" if use_vllm else "hf"),
            )
            timer = StepTimer()
            result = run_training(options, callbacks=[timer])
            times = timer.seconds[1:]
            rows.append(
                (
                    "vLLM colocate" if use_vllm else "HF generate",
                    statistics.median(times),
                    statistics.mean(times),
                    result.eval_after["overall"],
                    result.wall_seconds,
                )
            )
    print(f"{flags.steps} steps, strategy {flags.strategy}, torch threads 1")
    print("| generation | median s/step | mean s/step | held-out after | run wall s |")
    print("|---|---|---|---|---|")
    for name, median, mean, accuracy, wall in rows:
        print(f"| {name} | {median:.3f} | {mean:.3f} | {accuracy:.2f} | {wall:.0f} |")
    print(f"vLLM / HF median step time: {rows[1][1] / rows[0][1]:.2f}")


if __name__ == "__main__":  # vLLM's engine may start worker processes: keep them from re-running this file
    main()
