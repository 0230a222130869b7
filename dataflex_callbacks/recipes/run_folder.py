"""The run folder of `dataflex run`: its path checks, its creation and clean-up, and the files written into it."""

from __future__ import annotations

import datetime as _datetime
import json
import os
import shutil

from .options import RunInputError, RunOptions

RUN_FILES = ("config.json", "metrics.jsonl", "eval.json", "plot.png")
TRAINER_FOLDER = "trainer"  # the trainer's scratch folder inside the run folder, removed after training


def resolve_output_dir(options: RunOptions) -> str:
    """Return the run folder, refusing a path that cannot be a folder, or one that holds a run unless `overwrite`."""
    if options.output_dir:
        path = os.fspath(options.output_dir)
    else:
        stamp = _datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = os.path.splitext(os.path.basename(str(options.strategy)))[0] or "run"
        path = os.path.join("runs", f"{name}-{stamp}")
    check_folder_path(path)
    existing = [name for name in RUN_FILES if os.path.exists(os.path.join(path, name))]
    if existing and not options.overwrite:
        raise RunInputError(
            f"{path!r} already holds a run ({', '.join(existing)}); pass --overwrite or another --output-dir"
        )
    return path


def check_folder_path(path: str, flag: str = "--output-dir", error: type = None) -> None:
    """Refuse a folder path that is a file or lies under a file (one line naming the blocking file)."""
    error = error or RunInputError
    if os.path.exists(path) and not os.path.isdir(path):
        raise error(f"{flag} {path!r} is a file, not a folder; choose a folder path with {flag}")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise error(
            f"{flag} {path!r} cannot be created: {parent!r} is a file; choose a path under a folder with {flag}"
        )


class OutputFolder:
    """The folder a job writes into: created (with its missing parents) and write-tested up front, and
    removed again, with everything in it, when the job fails before finishing, if this job created it.

    A folder that existed before is never removed; only `leftovers` (e.g. the trainer's scratch
    folder) are removed from it.
    """

    def __init__(self, path: str, flag: str = "--output-dir", error: type = None, leftovers: tuple = ()):
        self.path = path
        self.flag = flag
        self.error = error or RunInputError
        self.leftovers = tuple(leftovers)
        self.created: str | None = None  # topmost folder this job created

    def create(self) -> OutputFolder:
        """Make the folder and check a file can be written in it; raises the job's input error if not."""
        check_folder_path(self.path, self.flag, self.error)
        absolute = os.path.abspath(self.path)
        top = None
        probe = absolute
        while not os.path.exists(probe):
            top = probe
            probe = os.path.dirname(probe)
        try:
            os.makedirs(absolute, exist_ok=True)
            self.created = top
            test_file = os.path.join(absolute, f".dataflex-write-test.{os.getpid()}")
            with open(test_file, "w") as handle:
                handle.write("ok")
            os.remove(test_file)
        except OSError as failure:
            self.created = top if top is not None and os.path.isdir(top) else None
            self.discard()
            reason = failure.strerror or type(failure).__name__
            raise self.error(
                f"cannot write to {self.flag} {self.path!r} ({reason}); choose a folder you can write to "
                f"with {self.flag}"
            ) from None
        return self

    def discard(self) -> None:
        """Remove what this job created (the whole folder if it made it, else only the leftovers)."""
        if self.created is not None:
            shutil.rmtree(self.created, ignore_errors=True)
            self.created = None
            return
        for name in self.leftovers:
            target = os.path.join(self.path, name)
            if os.path.isdir(target):
                shutil.rmtree(target, ignore_errors=True)
            elif os.path.exists(target):
                os.remove(target)


def write_run_files(output_dir: str, config: dict, metrics: list[dict], evaluation: dict, domains: list[str]) -> dict:
    """Write the run files (`RUN_FILES`) into `output_dir`: config.json, metrics.jsonl (one line per step), eval.json
    (the held-out evaluation, `held_out.HeldOutEvaluation.record`) and plot.png; returns `name -> path`."""
    files = {name: os.path.join(output_dir, name) for name in RUN_FILES}
    with open(files["config.json"], "w") as handle:
        json.dump(config, handle, indent=2, sort_keys=True, default=str)
    with open(files["metrics.jsonl"], "w") as handle:
        for record in metrics:
            handle.write(json.dumps(record, sort_keys=True) + "\n")
    with open(files["eval.json"], "w") as handle:
        json.dump(evaluation, handle, indent=2, sort_keys=True)
    write_plot(files["plot.png"], metrics, domains)
    return files


def domain_colors(domains: list[str]) -> dict[str, object]:
    """One distinct colour per domain: matplotlib's ten-colour cycle up to ten domains, tab20 up to twenty,
    else evenly spaced hues (the cycle would give the 11th domain the 1st one's colour)."""
    import matplotlib

    if len(domains) <= 10:
        return {d: f"C{i}" for i, d in enumerate(domains)}
    if len(domains) <= 20:
        palette = matplotlib.colormaps["tab20"]
        return {d: palette(i) for i, d in enumerate(domains)}
    palette = matplotlib.colormaps["hsv"]
    return {d: palette(i / len(domains)) for i, d in enumerate(domains)}


def write_plot(path: str, metrics: list[dict], domains: list[str]) -> None:
    """Plot reward per domain, kept fraction and domain proportions over steps into `path` (PNG).

    With a mixing strategy the proportions panel shows each domain's target and actual share.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [m["step"] for m in metrics]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    colors = domain_colors(domains)
    for domain in domains:
        values = [m.get(f"reward/{domain}") for m in metrics]
        axes[0].plot(steps, [float("nan") if v is None else v for v in values], label=domain, color=colors[domain])
    axes[0].set(title="reward per domain", xlabel="step", ylim=(-0.05, 1.05))
    axes[0].legend(fontsize="small")
    axes[1].plot(steps, [m.get("kept_frac", 1.0) for m in metrics], color="black")
    axes[1].set(title="kept fraction", xlabel="step", ylim=(-0.05, 1.05))
    mixing = any(f"dataflex/mix/target/{d}" in m for m in metrics for d in domains)
    if mixing:
        # Target (dashed) against actual (solid: share of the last sampler batches) per domain.
        for domain in domains:
            color = colors[domain]
            target = [m.get(f"dataflex/mix/target/{domain}") for m in metrics]
            actual = [m.get(f"dataflex/mix/actual/{domain}", m.get(f"mix/actual/{domain}")) for m in metrics]
            axes[2].plot(
                steps, [float("nan") if v is None else v for v in actual], color=color, label=f"{domain} actual"
            )
            axes[2].plot(
                steps,
                [float("nan") if v is None else v for v in target],
                color=color,
                linestyle="--",
                label=f"{domain} target",
            )
        axes[2].set(title="domain proportions: target (--) and actual", xlabel="step", ylim=(0, 1))
    else:
        shares = [[m.get(f"mix/actual/{d}") or 0.0 for m in metrics] for d in domains]
        if steps:
            axes[2].stackplot(steps, shares, labels=domains, colors=[colors[d] for d in domains])
        axes[2].set(title="domain proportions (sampled)", xlabel="step", ylim=(0, 1))
    axes[2].legend(fontsize="small", loc="upper right")
    figure.tight_layout()
    figure.savefig(path, dpi=80)
    plt.close(figure)
