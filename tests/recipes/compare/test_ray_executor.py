"""`dataflex compare --executor ray` on a local Ray cluster, and the GPU placement of `--jobs N`.

One local Ray (2 CPUs) serves the module. The grids are tiny (2 steps of 2 prompts x 2 completions,
2 held-out prompts per domain). A test-only scorer kills its own worker process (SIGKILL) to play
a node or the OOM killer; a test-only reward records the `CUDA_VISIBLE_DEVICES` each worker saw.
"""

import csv
import json
import sys

import pytest

from dataflex_callbacks.recipes.compare.workers import WorkerDiedError, plan_devices, visible_gpus

HELPERS = '''
import os
import signal
import time

from dataflex_callbacks.components.scorers import RewardScorer

HERE = os.path.dirname(os.path.abspath(__file__))


def exact_noting_devices(prompts, completions, answer, **columns):
    """1 for a completion equal to the answer; notes the process and the GPUs it may use."""
    with open(os.path.join(HERE, "devices.log"), "a") as log:
        log.write(f"{os.getpid()} {os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')}\\n")
    return [1.0 if c.strip() == str(a) else 0.0 for c, a in zip(completions, answer)]


class KillingScorer(RewardScorer):
    """The reward scorer, whose worker process kills itself (SIGKILL) on its first score, `times` times in all
    (counted in `deaths_file`), once the file `wait_for` exists."""

    def __init__(self, deaths_file, times, wait_for=None):
        self.deaths_file, self.times, self.wait_for = deaths_file, times, wait_for

    def _score(self, batch):
        deaths = open(self.deaths_file).read().split() if os.path.exists(self.deaths_file) else []
        if len(deaths) < self.times:
            deadline = time.monotonic() + 300
            while self.wait_for and not os.path.exists(self.wait_for) and time.monotonic() < deadline:
                time.sleep(0.2)
            with open(self.deaths_file, "a") as handle:
                handle.write(f"{os.getpid()}\\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.kill(os.getpid(), signal.SIGKILL)
        return super()._score(batch)
'''
TINY = dict(
    seeds=2,
    budget="steps:2",
    eval_points=0,
    prompts_per_step=2,
    num_generations=2,
    n_train=4,
    n_test=2,
    suite="toy",
    domains=["digit", "echo"],
    reward_funcs=["t30_ray_helpers:exact_noting_devices"],
)
TIME_COLUMNS = ("wall_seconds", "run_dir")


# --- the device plan of --jobs N (pure) ---


@pytest.mark.parametrize(
    "jobs, gpus, per_gpu, devices, capped",
    [
        (4, [], 1, (), None),  # no GPU: CPU workers, --jobs kept
        (4, ["0", "1", "2", "3"], 1, ("0", "1", "2", "3"), None),
        (2, ["0", "1", "2", "3"], 1, ("0", "1"), None),
        (6, ["0", "1", "2", "3"], 1, ("0", "1", "2", "3"), 6),  # capped at one run per GPU
        (6, ["0", "1", "2", "3"], 2, ("0", "1", "2", "3", "0", "1"), None),  # round the GPUs before sharing one
        (5, ["2", "7"], 2, ("2", "7", "2", "7"), 5),  # the parent's CUDA_VISIBLE_DEVICES entries, kept
    ],
)
def test_plan_devices(jobs, gpus, per_gpu, devices, capped):
    plan = plan_devices(jobs, gpus, per_gpu)
    assert plan.devices == devices and plan.capped_from == capped
    assert plan.workers == (len(devices) if gpus else jobs)


def test_plan_devices_says_where_runs_go_and_why_jobs_were_capped():
    assert plan_devices(4, ["0", "1", "2", "3"]).placement() == "runs placed on GPUs 0,1,2,3, one run per GPU"
    assert plan_devices(3, ["0", "1"], 2).placement() == "runs placed on GPUs 0,1, up to 2 runs per GPU"
    assert plan_devices(3, [], 1).placement() is None and plan_devices(3, [], 1).cap_warning() is None
    warning = plan_devices(8, ["0", "1"], 1).cap_warning()
    assert "--jobs 8" in warning and "2 GPU(s)" in warning and "running 2 at once" in warning, warning


def test_no_gpu_is_no_placement():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert visible_gpus() == []


@pytest.mark.parametrize(
    "flags, expected",
    [
        (["--executor", "dask"], "--executor 'dask' is not one of processes, ray"),
        (["--address", "head:6379"], "add --executor ray"),
        (["--runs-per-gpu", "0"], "--runs-per-gpu"),
    ],
)
def test_bad_executor_flags_are_one_line_exit_2(tmp_path, capsys, flags, expected):
    from dataflex_callbacks.recipes.cli import main

    assert main(["compare", *flags, "--output-dir", str(tmp_path / "cmp")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("dataflex: error: ") and "\n" not in error and expected in error, error
    assert not (tmp_path / "cmp").exists()


def test_executor_ray_without_ray_names_the_extra(tmp_path, capsys, monkeypatch):
    from dataflex_callbacks.recipes.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails, as where it is not installed
    assert main(["compare", "--executor", "ray", "--output-dir", str(tmp_path / "cmp")]) == 2
    assert "pip install 'ray[default]>=2.9'" in capsys.readouterr().err


# --- Ray grids ---


@pytest.fixture(scope="module")
def here(tmp_path_factory):
    """A folder holding the test-only reward and scorer, made the current directory for the module."""
    pytest.importorskip("trl")
    folder = tmp_path_factory.mktemp("ray")
    (folder / "t30_ray_helpers.py").write_text(HELPERS)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        patch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
        yield folder
    sys.modules.pop("t30_ray_helpers", None)


@pytest.fixture(scope="module")
def ray_cluster(here):
    ray = pytest.importorskip("ray")
    from dataflex_callbacks.recipes.compare.ray_executor import start_ray

    assert start_ray(num_cpus=2)  # the grids below find it running and leave it running
    yield ray
    ray.shutdown()


def _rows(folder):
    with open(folder / "results.csv", newline="") as handle:
        return {(row["strategy"], row["seed"]): row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def process_grid(here):
    """2 strategies x 2 seeds with `--jobs 2` worker processes, as if the machine had GPUs 3 and 5."""
    import contextlib
    import io

    from dataflex_callbacks.recipes.compare import compare, workers

    console = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(console):
        patch.setattr(workers, "visible_gpus", lambda: ["3", "5"])  # torch's CUDA count, on a CPU-only machine
        compare(["baseline", "difffilter"], jobs=2, output_dir=str(here / "processes"), progress=True, **TINY)
    seen = (here / "devices.log").read_text().split("\n")
    (here / "devices.log").unlink()
    return here / "processes", console.getvalue(), [line.split() for line in seen if line]


def test_each_worker_process_sees_its_own_gpu(process_grid):
    _, console, seen = process_grid
    assert "runs placed on GPUs 3,5, one run per GPU" in console, console
    devices = {}
    for pid, device in seen:
        devices.setdefault(pid, set()).add(device)
    assert all(len(d) == 1 for d in devices.values()), devices  # a worker keeps its GPU
    per_worker = [d.pop() for d in devices.values()]
    assert set(per_worker) <= {"3", "5"} and len(set(per_worker)) == len(per_worker), devices


def test_ray_gives_the_results_of_worker_processes(ray_cluster, process_grid, here):
    from dataflex_callbacks.recipes.compare import compare

    results = compare(
        ["baseline", "difffilter"], jobs=2, executor="ray", output_dir=str(here / "ray"), progress=False, **TINY
    )
    assert len(results.runs) == 4
    expected, got = _rows(process_grid[0]), _rows(here / "ray")
    assert (
        sorted(got)
        == sorted(expected)
        == [("baseline", "0"), ("baseline", "1"), ("difffilter", "0"), ("difffilter", "1")]
    )
    compared = [c for c in next(iter(expected.values())) if c not in TIME_COLUMNS and "seconds" not in c]
    assert {"accuracy_after_overall", "completions", "completion_tokens"} <= set(compared)
    for key in expected:
        assert {c: got[key][c] for c in compared} == {c: expected[key][c] for c in compared}, key


@pytest.fixture(scope="module")
def killing_grid(ray_cluster, here):
    """baseline, `killer` (its worker dies once, after baseline finished) and `doomed` (dies every time), seed 0."""
    from dataflex_callbacks.recipes.compare import compare

    folder = here / "killed"
    finished = folder / "runs" / "baseline-seed0" / "result.json"
    for name, times, wait_for in (("killer", 1, str(finished)), ("doomed", 99, None)):
        params = {"deaths_file": str(here / f"{name}.deaths"), "times": times, "wait_for": wait_for}
        strategy = {
            "select": {
                "scorer": {"name": "t30_ray_helpers:KillingScorer", "params": params},
                "selector": {"name": "threshold_band", "low": -1.0, "high": 2.0},
            }
        }
        (here / f"{name}.json").write_text(json.dumps(strategy))
    with pytest.raises(WorkerDiedError) as died:
        compare(
            ["baseline", str(here / "killer.json"), str(here / "doomed.json")],
            jobs=2,
            executor="ray",
            output_dir=str(folder),
            progress=False,
            **{**TINY, "seeds": [0]},
        )
    return folder, str(died.value)


def _deaths(here, name):
    return (here / f"{name}.deaths").read_text().split()


def test_a_killed_ray_worker_is_retried_and_no_finished_run_is_lost(killing_grid, here):
    folder, _ = killing_grid
    assert len(_deaths(here, "killer")) == 1  # killed once, after baseline-seed0 had finished
    for name in ("baseline-seed0", "killer-seed0"):
        record = json.loads((folder / "runs" / name / "result.json").read_text())
        assert record["name"] == name and record["steps"] == 2, name
    assert (folder / "runs" / "baseline-seed0" / "result.json").stat().st_mtime <= (
        here / "killer.deaths"
    ).stat().st_mtime  # written before the kill, never redone


def test_a_run_whose_worker_dies_twice_fails_with_worker_died_error_naming_it(killing_grid, here):
    folder, message = killing_grid
    assert len(_deaths(here, "doomed")) == 2  # the first try and the one retry
    assert "doomed-seed0" in message and "killer-seed0" not in message and "baseline-seed0" not in message, message
    assert "died on the first try and on the retry" in message and "run the same command again" in message
    assert not (folder / "runs" / "doomed-seed0" / "result.json").exists()
    assert (folder / "runs" / "baseline-seed0" / "result.json").exists()
    assert (folder / "runs" / "killer-seed0" / "result.json").exists()
