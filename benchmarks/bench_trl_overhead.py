"""Per-step time of TRL's GRPOTrainer with and without a DataFlex strategy, on the tiny local model.

Runs ``--steps`` optimizer steps of a stock ``GRPOTrainer``, a ``DataFlexGRPOTrainer`` with
``difffilter`` (selection), one with ``ar`` (token weights from the current policy) and one with
``dapo`` (dynamic sampling: it generates further rounds, so its wall time per step is larger by
design; its adapter time counts the batch rebuilding and excludes every round's generation), same seed,
alternating the runs over ``--rounds`` rounds so machine drift hits every variant alike. Every
completion is forced to ``--max-completion-length`` tokens so the variants generate the same
amount of text whatever they learn. Prints the median per-step time of each variant and its
ratio to the stock trainer (target: at most 1.05), plus the CPU time spent inside the adapter's
own code per step, which is the overhead free of machine noise.

    python benchmarks/bench_trl_overhead.py [--steps 30] [--rounds 3]

``--against DIR`` measures this checkout against another one (e.g. ``git worktree add
/tmp/before <commit>``) in the same session: each round runs one process per checkout, their
order alternating, and the table gives each variant's figures for both and the difference
(``stock`` is the same code in both, so its difference is the noise floor).

    python benchmarks/bench_trl_overhead.py --against /tmp/before [--steps 20] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from transformers import PrinterCallback, TrainerCallback  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from dataflex_callbacks.integrations.trl import DataFlexCallback, DataFlexGRPOTrainer  # noqa: E402
from dataflex_callbacks.recipes.tiny_model import build_tiny_model, build_tiny_tokenizer  # noqa: E402

VARIANTS = {"stock": None, "difffilter": "difffilter", "ar": "ar", "dapo": "dapo"}


def checksum_parity_reward(completions, **kwargs):
    """A deterministic 0/1 reward that varies within groups (parity of the characters' code sum)."""
    return [float(sum(map(ord, c)) % 2) for c in completions]


class StepTimer(TrainerCallback):
    """Wall and CPU time of every optimizer step (generation, loss, backward and optimizer included).

    CPU time of this process is the steadier measure on a shared machine: other processes
    slow the wall clock but not the work this process does.
    """

    def __init__(self):
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self._start = (0.0, 0.0)

    def on_step_begin(self, args, state, control, **kwargs):
        self._start = (time.perf_counter(), time.process_time())

    def on_step_end(self, args, state, control, **kwargs):
        self.wall.append(time.perf_counter() - self._start[0])
        self.cpu.append(time.process_time() - self._start[1])


HOOKS = ("calculate_rewards", "score_completions", "per_token_logps", "compute_loss")
ADAPTER_CPU: list[float] = []


def measure_adapter_self_time() -> None:
    """Wrap the adapter's hooks to add up the CPU time spent in them, minus the TRL code they call."""
    for name in HOOKS:
        hook = getattr(DataFlexCallback, name)

        def timed(self, trainer, original, *args, _hook=hook, **kwargs):
            inside = [0.0]

            def timed_original(*a, **k):
                start = time.process_time()
                try:
                    return original(*a, **k)
                finally:
                    inside[0] += time.process_time() - start

            start = time.process_time()
            result = _hook(self, trainer, timed_original, *args, **kwargs)
            ADAPTER_CPU.append(time.process_time() - start - inside[0])
            return result

        setattr(DataFlexCallback, name, timed)


def run(variant: str, steps: int, seed: int, batch: int, generations: int, length: int) -> tuple[list, list]:
    tokenizer = build_tiny_tokenizer()
    dataset = Dataset.from_dict({"prompt": [f"{i}+{i % 9}=" for i in range(512)]})
    timer = StepTimer()
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            per_device_train_batch_size=batch,
            num_generations=generations,
            max_completion_length=length,
            generation_kwargs={"min_new_tokens": length},
            max_steps=steps,
            learning_rate=1e-3,
            logging_steps=10,
            report_to=[],
            save_strategy="no",
            use_cpu=True,
            seed=seed,
            bf16=False,
            disable_tqdm=True,
        )
        kwargs = dict(
            model=build_tiny_model(tokenizer, seed=seed),
            reward_funcs=checksum_parity_reward,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        strategy = VARIANTS[variant]
        trainer = GRPOTrainer(**kwargs) if strategy is None else DataFlexGRPOTrainer(**kwargs, strategy=strategy)
        trainer.remove_callback(PrinterCallback)
        trainer.train()
    return timer.wall[1:], timer.cpu[1:]  # the first step pays one-off warm-up costs


REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def import_root(checkout: str, scratch: str) -> str:
    """A folder whose ``dataflex_callbacks`` is ``checkout``'s, with the adapters where the installed package has them.

    Links only (in ``scratch``): nothing is written into ``checkout``.
    """
    package = os.path.join(scratch, "dataflex_callbacks")
    os.makedirs(package)
    source = os.path.join(checkout, "dataflex_callbacks")
    for entry in os.listdir(source):
        if entry != "__pycache__":
            os.symlink(os.path.join(source, entry), os.path.join(package, entry))
    # A checkout from before the adapters moved inside the package kept them in a top-level integrations/.
    if not os.path.exists(os.path.join(package, "integrations")):
        os.symlink(os.path.join(checkout, "integrations"), os.path.join(package, "integrations"))
    return scratch


def compare(options, passed: list[str]) -> None:
    """Alternate one process per checkout per round; print both checkouts' figures and their difference."""
    trees = {"before": os.path.abspath(options.against), "after": REPO}
    results: dict[str, list[dict]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as scratch:
        roots = {tree: import_root(path, os.path.join(scratch, tree)) for tree, path in trees.items()}
        for round_index in range(options.rounds):
            order = ["before", "after"] if round_index % 2 == 0 else ["after", "before"]
            for tree in order:
                out = os.path.join(scratch, f"{tree}-{round_index}.json")
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([roots[tree], os.environ.get("PYTHONPATH", "")])}
                done = subprocess.run(
                    [
                        sys.executable,
                        os.path.abspath(__file__),
                        *passed,
                        "--rounds",
                        "1",
                        "--seed",
                        str(options.seed + round_index),
                        "--json",
                        out,
                    ],
                    env=env,
                    cwd=scratch,
                    capture_output=True,
                    text=True,
                )
                if done.returncode:
                    sys.exit(f"the {tree} checkout's run failed:\n{done.stderr[-4000:]}")
                with open(out, encoding="utf-8") as handle:
                    result = json.load(handle)
                for module in result["imported"]:  # each process ran the checkout it was given
                    assert os.path.realpath(module).startswith(os.path.realpath(trees[tree])), (tree, module)
                results[tree].append(result)
                print(
                    f"round {round_index + 1}: {tree:<6} "
                    + ", ".join(
                        f"{name} {1000 * statistics.median(result['wall'][name]):.1f} ms wall / "
                        f"{1000 * result['adapter'][name]:.3f} ms adapter"
                        for name in VARIANTS
                    )
                )
    print(
        f"\n{options.steps} optimizer steps x {options.rounds} rounds per checkout, alternating; before = "
        f"{trees['before']}, after = {trees['after']}"
    )
    print(
        f"{'variant':<12}{'wall before':>13}{'wall after':>12}{'diff':>9}{'cpu before':>12}{'cpu after':>11}"
        f"{'diff':>9}{'adapter before':>16}{'adapter after':>15}{'diff':>9}   (ms/step)"
    )
    for name in VARIANTS:
        row = []
        for key in ("wall", "cpu"):
            medians = [statistics.median([t for r in results[tree] for t in r[key][name]]) for tree in trees]
            row += [1000 * medians[0], 1000 * medians[1], 1000 * (medians[1] - medians[0])]
        adapter = [statistics.mean(r["adapter"][name] for r in results[tree]) for tree in trees]
        row += [1000 * adapter[0], 1000 * adapter[1], 1000 * (adapter[1] - adapter[0])]
        print(
            f"{name:<12}"
            + "".join(
                f"{v:>{w}.2f}" if i % 3 != 2 else f"{v:>+{w}.2f}"
                for i, (v, w) in enumerate(zip(row, (13, 12, 9, 12, 11, 9, 16, 15, 9), strict=True))
            )
        )
    print(
        "wall and cpu: medians over all steps of all rounds; adapter: CPU time inside the adapter's hooks per step;\n"
        "stock runs the same code in both checkouts, so its difference is the noise floor."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=8, help="per-device batch (rows)")
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-completion-length", type=int, default=16)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--against",
        metavar="DIR",
        help="another checkout of this repository to compare with, alternating one process per checkout per round",
    )
    parser.add_argument(
        "--variants",
        default=",".join(VARIANTS),
        help=f"comma-separated subset of {', '.join(VARIANTS)} (stock is always run: the ratios need it)",
    )
    parser.add_argument("--json", metavar="PATH", help=argparse.SUPPRESS)  # one process's figures, for --against
    options = parser.parse_args()
    chosen = ["stock"] + [name for name in options.variants.split(",") if name and name != "stock"]
    unknown = sorted(set(chosen) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    for name in list(VARIANTS):
        if name not in chosen:
            del VARIANTS[name]
    if options.against:
        compare(
            options,
            [
                f"--{k.replace('_', '-')}={v}"
                for k, v in vars(options).items()
                if k in ("steps", "batch", "generations", "max_completion_length", "threads", "variants")
            ],
        )
        return
    torch.set_num_threads(options.threads)
    hf_logging.set_verbosity_error()

    measure_adapter_self_time()
    wall: dict[str, list[float]] = {name: [] for name in VARIANTS}
    cpu: dict[str, list[float]] = {name: [] for name in VARIANTS}
    adapter: dict[str, float] = {name: 0.0 for name in VARIANTS}
    names = list(VARIANTS)
    for round_index in range(options.rounds):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]  # rotate who goes first
        for name in order:
            ADAPTER_CPU.clear()
            step_wall, step_cpu = run(
                name, options.steps, options.seed, options.batch, options.generations, options.max_completion_length
            )
            adapter[name] += sum(ADAPTER_CPU) / options.steps / options.rounds
            wall[name].extend(step_wall)
            cpu[name].extend(step_cpu)
            print(
                f"round {round_index + 1}: {name:<10} median step {1000 * statistics.median(step_wall):7.2f} ms wall, "
                f"{1000 * statistics.median(step_cpu):7.2f} ms cpu"
            )

    if options.json:
        import dataflex_callbacks.integrations.trl as trl_adapter
        import dataflex_callbacks.strategy as strategy_module

        with open(options.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "wall": wall,
                    "cpu": cpu,
                    "adapter": adapter,
                    "imported": [strategy_module.__file__, trl_adapter.__file__],
                },
                handle,
            )
    stock_wall, stock_cpu = statistics.median(wall["stock"]), statistics.median(cpu["stock"])
    print(
        f"\n{options.steps} optimizer steps x {options.rounds} rounds, batch {options.batch}, "
        f"{options.generations} generations, {options.max_completion_length} tokens, {options.threads} thread(s)"
    )
    print(
        f"{'variant':<12}{'wall ms/step':>14}{'wall ratio':>12}{'cpu ms/step':>14}{'cpu ratio':>12}"
        f"{'adapter ms/step':>17}{'1 + adapter/stock':>19}"
    )
    for name in names:
        median_wall, median_cpu = statistics.median(wall[name]), statistics.median(cpu[name])
        print(
            f"{name:<12}{1000 * median_wall:>14.2f}{median_wall / stock_wall:>12.3f}"
            f"{1000 * median_cpu:>14.2f}{median_cpu / stock_cpu:>12.3f}"
            f"{1000 * adapter[name]:>17.3f}{1 + adapter[name] / stock_cpu:>19.3f}"
        )
    print(
        "adapter ms/step: CPU time inside the adapter's hooks (TRL's own code excluded), the overhead itself;\n"
        "the wall/cpu ratios also carry run-to-run noise from other processes on the machine."
    )


if __name__ == "__main__":
    main()
