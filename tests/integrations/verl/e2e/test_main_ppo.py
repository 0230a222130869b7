"""verl's real trainer end to end: ``verl.trainer.main_ppo`` with the ``dataflex_sync`` trainer, on a CPU.

Each run is one ``scripts/verl_e2e.sh`` call (verl 0.9.1, Ray, an FSDP2 actor, vLLM's CPU rollout,
TransferQueue; a tiny Qwen2 and a two-domain parquet built locally), read back through verl's own
outputs: the per-step metrics of its file logger (``metrics.jsonl``), its rollout dump
(``trainer.rollout_data_dir``: every prompt, response and score of a step), its checkpoints, and
the lines ``scripts/verl_e2e/loss_probe.py`` writes from inside the actor's policy loss. A run
takes minutes and 8-13 GB, so the runs are few, shared between tests (one per configuration,
several steps each), and one at a time. ``scripts/test_verl_e2e.sh`` runs this file.

Every run forces vLLM's repacking CPU dispatch in its vLLM workers (``scripts/verl_e2e/force_repack.py``),
so that on any CPU the runs meet what AVX-512 and AMX machines do to the engine's weights, and pass
only through the live-weight fix ``scripts/verl_e2e.sh`` turns on (``DATAFLEX_VLLM_LIVE_WEIGHTS=1``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

pytest.importorskip("verl", reason="verl is not installed here; run scripts/test_verl_e2e.sh (uses .venv-verl)")

import torch  # noqa: E402
import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[4]
HERE = Path(__file__).resolve().parent
SCRIPT = ROOT / "scripts" / "verl_e2e.sh"
# The last guard against a hung run (supervise.py ends a run whose vLLM engine failed or died within
# its grace): runs measured 150-230 s on 2-core machines, AVX2 and AVX-512 alike; a guard, not a speed
# test, so it leaves a run on a machine at load 10 (several times slower) the time to finish.
RUN_TIMEOUT_S = 1500
KILL_GRACE_S = 60  # a run whose vLLM worker is killed must end within this
PROMPTS, GROUP = 8, 4  # data.train_batch_size, rollout.n of every run here
ROWS = PROMPTS * GROUP
# Metrics that measure the machine (time, throughput, memory), not the training: never compared.
MACHINE_METRICS = ("timing", "perf/", "throughput", "memory", "time", "mfu")


@dataclass
class Run:
    """One finished ``main_ppo`` run: its folder, per-step metrics, rollouts and probe lines."""

    name: str
    out: Path
    seconds: float
    peak_gb: float
    metrics: list[dict] = field(default_factory=list)
    exit_code: int | str = 0
    killed: str = ""  # the vLLM process killed mid-run, if any
    ended_after_kill_s: float | None = None

    def step(self, n: int) -> dict:
        for row in self.metrics:
            if row["step"] == n:
                return row["data"]
        raise AssertionError(f"run {self.name}: no metrics for step {n}; steps: {[r['step'] for r in self.metrics]}")

    def rollouts(self, n: int) -> list[dict]:
        path = self.out / "rollouts" / f"{n}.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()]

    def probe(self) -> list[dict]:
        path = self.out / "probe.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def log(self) -> str:
        return (self.out / "run.log").read_text(errors="replace")

    def repacked_processes(self) -> list[dict]:
        path = self.out / "repack.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _used_memory_gb() -> float:
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines())
    kb = lambda key: int(info[key].split()[0])  # noqa: E731
    return (kb("MemTotal") - kb("MemAvailable")) / 2**20


class _PeakMemory:
    """The machine's peak used memory during a run, above what was in use at its start (Ray's workers are
    not children of the launching process, so a per-process figure would miss most of the run)."""

    def __init__(self):
        self.start, self.peak, self._stop = _used_memory_gb(), 0.0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.wait(1.0):
            self.peak = max(self.peak, _used_memory_gb() - self.start)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak


_RUNS: dict[str, Run] = {}


def _vllm_worker(root_pid: int):
    """The vLLM worker process (title ``VLLM::Worker...``) under ``root_pid``, or None."""
    import psutil

    try:
        for process in psutil.Process(root_pid).children(recursive=True):
            try:
                if " ".join(process.cmdline()).startswith("VLLM::Worker"):
                    return process
            except psutil.Error:
                continue
    except psutil.NoSuchProcess:
        return None
    return None


def _logged_steps(out: Path) -> int:
    path = out / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def run_main_ppo(
    name: str, *overrides: str, steps: int = 2, probe: bool = False, kill_worker_after_step: int | None = None
) -> Run:
    """Run ``scripts/verl_e2e.sh`` once per name (cached for the session); fail with the log's tail on error.

    ``kill_worker_after_step``: once that many steps are logged, SIGKILL the run's vLLM worker process and
    expect the run to end non-zero within `KILL_GRACE_S` (``Run.ended_after_kill_s``).
    """
    if name in _RUNS:
        return _RUNS[name]
    base = Path(os.environ.get("VERL_E2E_BASE", ROOT / "runs" / "verl_e2e_tests"))
    out = base / name
    if os.environ.get("VERL_E2E_REUSE") == "1" and (out / "metrics.jsonl").exists():
        # Development only: read a finished run's folder again instead of running verl (CI never sets it).
        run = Run(name, out, 0.0, 0.0, [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()])
        _RUNS[name] = run
        return run
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    out.mkdir(parents=True)
    modules = ["force_repack", "loss_probe" if probe else "", os.environ.get("VERL_E2E_EXTRA_MODULES", "")]
    env = dict(
        os.environ,
        VERL_E2E_OUT=str(out),
        VERL_E2E_STEPS=str(steps),
        VERL_E2E_EXTRA_MODULES=",".join(filter(None, modules)),
        DATAFLEX_E2E_REPACK_LOG=str(out / "repack.jsonl"),
    )
    if probe:
        env["DATAFLEX_E2E_PROBE"] = str(out / "probe.jsonl")
        overrides = ("actor_rollout_ref.actor.policy_loss.loss_mode=probe_vanilla", *overrides)
    args = [
        "bash",
        str(SCRIPT),
        f"data.train_batch_size={PROMPTS}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={PROMPTS}",
        f"actor_rollout_ref.rollout.n={GROUP}",
        f"trainer.rollout_data_dir={out / 'rollouts'}",
        *overrides,
    ]
    memory, start = _PeakMemory(), time.monotonic()
    killed, killed_at = "", None
    with open(out / "run.log", "w") as log:
        # Its own process group: on a timeout the driver and the Ray processes it started go together
        # (a finished driver shuts its local Ray cluster down itself).
        proc = subprocess.Popen(args, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            if kill_worker_after_step is not None:
                while proc.poll() is None and _logged_steps(out) < kill_worker_after_step:
                    assert time.monotonic() - start < RUN_TIMEOUT_S, (
                        f"run {name!r}: step {kill_worker_after_step} never came"
                    )
                    time.sleep(0.5)
                worker = _vllm_worker(proc.pid) if proc.poll() is None else None
                assert worker is not None, f"run {name!r}: no vLLM worker to kill (exit {proc.poll()})"
                killed = " ".join(worker.cmdline())
                worker.kill()
                killed_at = time.monotonic()
            rc = proc.wait(timeout=max(1.0, RUN_TIMEOUT_S - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = "timeout"
    run = Run(
        name,
        out,
        time.monotonic() - start,
        memory.stop(),
        exit_code=rc,
        killed=killed,
        ended_after_kill_s=None if killed_at is None else time.monotonic() - killed_at,
    )
    print(
        f"\nverl e2e run {name!r}: {run.seconds:.0f} s, peak {run.peak_gb:.1f} GB above idle, exit {rc}"
        + (f", ended {run.ended_after_kill_s:.0f} s after its vLLM worker was killed" if killed else "")
    )
    if rc != 0 and not killed:
        tail = "\n".join(run.log().splitlines()[-60:])
        pytest.fail(f"main_ppo run {name!r} exited {rc}; {out / 'run.log'} ends:\n{tail}")
    metrics_path = out / "metrics.jsonl"
    run.metrics = [json.loads(line) for line in metrics_path.read_text().splitlines()] if metrics_path.exists() else []
    # The forcing reached the processes that load the model: a passing run passed with the repack forced.
    assert run.repacked_processes(), (
        f"run {name!r}: force_repack acted in no vLLM process; the run proves nothing "
        f"about repacking CPUs ({out / 'repack.jsonl'} is empty)"
    )
    _RUNS[name] = run
    return run


def training_metrics(step: dict) -> dict[str, float]:
    """The step's numeric metrics that describe training (not the machine's speed or memory)."""
    return {
        k: v for k, v in step.items() if isinstance(v, (int, float)) and not any(word in k for word in MACHINE_METRICS)
    }


def dataflex_strategy(name: str) -> str:
    return f"+dataflex.strategy={HERE / name}"


SELECT_MIX = (
    "trainer.v1.trainer_mode=dataflex_sync",
    dataflex_strategy("select_mix.yaml"),
    "trainer.save_freq=1",
    # pass rates near 1/2: groups of exactly 2 passes in 4, the ones the band keeps, at almost every step
    "reward.custom_reward_function.name=compute_score_near_even",
)


# ---------------------------------------------------------------- select: dropped rows never reach the loss


def probe_per_step(run: Run) -> list[dict]:
    """The probe's lines summed per training step (one line per actor micro-batch; a step holds ROWS responses)."""
    steps, current = [], Counter()
    for call in run.probe():
        current.update({k: call[k] for k in ("rows", "masked_in", "grad_rows")})
        if current["rows"] == ROWS:
            steps.append(dict(current))
            current = Counter()
    assert not current, f"run {run.name}: micro-batches that do not add up to a step of {ROWS} responses: {run.probe()}"
    return steps


def passes_per_group(run: Run, step: int) -> list[int]:
    """Passing responses of each prompt group of a step, from verl's rollout dump (keys ``{uid}_{session}_{i}``)."""
    groups = Counter()
    for row in run.rollouts(step):
        groups[row["uid"].rsplit("_", 2)[0]] += int(row["score"] > 0)
    assert sum(1 for _ in groups) == PROMPTS, groups
    return sorted(groups.values())


def test_select_drops_rows_and_dropped_rows_get_no_gradient():
    run = run_main_ppo("select_mix", *SELECT_MIX, probe=True)
    per_step = probe_per_step(run)
    assert len(per_step) == 2, per_step
    for step, seen in zip((1, 2), per_step, strict=True):
        metrics = run.step(step)
        kept = round(metrics["dataflex/kept_frac"] * ROWS)
        passes = passes_per_group(run, step)
        # The band keeps groups of exactly 2 passes of 4; all of their responses have a non-zero advantage.
        assert kept == GROUP * passes.count(2), (kept, passes)
        # Exactly the kept responses reach the policy gradient; the dropped ones include every group of
        # 1 or 3 passes, which stock GRPO trains on (non-zero advantages).
        assert seen["grad_rows"] == kept, (
            f"step {step}: {seen['grad_rows']} responses reached the policy "
            f"gradient, the strategy kept {kept} (passes per group {passes})"
        )
        # Dropped responses leave the loss mask too; a step that drops everything keeps verl's masks
        # (an all-zero token count would make the loss NaN) and zero weights (docs/verl.md, limits).
        assert seen["masked_in"] == (kept if kept else ROWS), (seen, kept)
    trained_on_by_stock = [GROUP * sum(p in (1, 3) for p in passes_per_group(run, s)) for s in (1, 2)]
    assert sum(trained_on_by_stock) > 0, f"no dropped group carried a gradient in stock GRPO: {trained_on_by_stock}"
    assert any(0 < run.step(s)["dataflex/kept_frac"] < 1 for s in (1, 2)), (
        f"no step both kept and dropped rows: {[run.step(s)['dataflex/kept_frac'] for s in (1, 2)]}"
    )
    # The train-end line (RunSummary) counts the steps the metrics show (Ray prefixes the actor's lines).
    dropped = sum(int(run.step(s)["dataflex/dropped_all"]) for s in (1, 2))
    end = [line for line in run.log().splitlines() if "dataflex: train end: strategy" in line]
    assert len(end) == 1 and f": 2 steps, {dropped} kept nothing, mean kept fraction " in end[0], end


def test_the_engine_samples_with_the_trainers_weights_despite_the_forced_repack():
    # verl measures, per token, the engine's sampling log-probs against the trainer's for the same tokens.
    # Each step's responses come from the engine after a weight sync; a stale packed copy would serve the
    # previous weights whenever a step trained (and without the live-weight fix the sync itself fails:
    # docs/verl.md). Measured here: log-ppl gaps of 0.0002-0.0012, against 0.02-0.3 moves between steps.
    run = run_main_ppo("select_mix", *SELECT_MIX, probe=True)
    for step in (1, 2):
        metrics = run.step(step)
        assert abs(metrics["rollout_corr/log_ppl_diff"]) < 0.01, (step, metrics["rollout_corr/log_ppl_diff"])
        assert metrics["training/rollout_probs_diff_max"] < 0.05, (step, metrics["training/rollout_probs_diff_max"])


# ---------------------------------------------------------------- mix: the next prompts follow the target


def step_rewards(run: Run, step: int) -> dict[str, float]:
    """Mean reward of each domain at ``step``, recomputed from verl's rollout dump (hard prompts hold ``*``)."""
    scores = {"easy": [], "hard": []}
    for row in run.rollouts(step):
        scores["hard" if "*" in row["input"] else "easy"].append(float(row["score"]))
    return {domain: sum(values) / len(values) for domain, values in scores.items()}


def test_mix_moves_the_next_prompts_toward_the_target():
    run = run_main_ppo("select_mix", *SELECT_MIX, probe=True)
    first, second = run.step(1), run.step(2)
    target = {d: first[f"dataflex/mix/target/{d}"] for d in ("easy", "hard")}
    # reward_gap gives more data to the domain with the lower reward. Which one lags at step 1 is the
    # rollout's: the test reward passes `easy` more often on average, but 16 responses of an untrained
    # model are not independent draws, and vLLM's batching makes them differ from run to run.
    rewards = step_rewards(run, 1)
    assert rewards == {d: pytest.approx(first[f"dataflex/selection_reward/{d}"]) for d in rewards}, (rewards, first)
    if rewards["easy"] == rewards["hard"]:
        assert target["easy"] == pytest.approx(target["hard"]), (rewards, target)
        return
    lagging = min(rewards, key=rewards.get)
    assert target[lagging] > 0.5, (
        f"the lagging domain {lagging!r} should get more data after step 1: {target}, step-1 rewards {rewards}"
    )
    # Step 1's prompts were drawn at the prior (even split); step 2's at step 1's target, exact quotas.
    share = {s: sum(("*" in row["input"]) == (lagging == "hard") for row in run.rollouts(s)) / ROWS for s in (1, 2)}
    assert share[1] == 0.5, share
    assert abs(share[2] - target[lagging]) < abs(share[1] - target[lagging]), (share, target)
    assert abs(share[2] - target[lagging]) <= 1 / PROMPTS, (share, target)
    assert second[f"dataflex/mix/actual/{lagging}"] > first[f"dataflex/mix/actual/{lagging}"], (first, second)


# ---------------------------------------------------------------- resume


def test_resume_from_step_one_repeats_the_uninterrupted_step_two():
    full = run_main_ppo("select_mix", *SELECT_MIX, probe=True)
    checkpoint = full.out / "checkpoints" / "global_step_1"
    assert (checkpoint / "data.pt").exists() and (checkpoint / "dataflex.pt").exists(), list(checkpoint.iterdir())
    resumed = run_main_ppo(
        "resumed", *SELECT_MIX, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoint}"
    )
    assert [row["step"] for row in resumed.metrics] == [2], [row["step"] for row in resumed.metrics]
    # What the checkpoint restores decides step 2's prompts: the dataloader and sampler state (data.pt)
    # and the mix target and draw history (dataflex.pt). Step 1's target moves prompts toward the domain
    # whose reward lagged (7 of 8 in one run); a fresh mix would draw 4 and 4.
    prompts = lambda run: Counter(row["input"] for row in run.rollouts(2))  # noqa: E731
    assert prompts(resumed) == prompts(full)
    restored = [k for k in full.step(2) if k.startswith("dataflex/mix/actual/")]
    assert restored and {k: resumed.step(2)[k] for k in restored} == {k: full.step(2)[k] for k in restored}
    # The responses themselves are sampled again: vLLM's sampler is seeded once per engine start
    # (rollout.seed), so a resumed engine draws other responses for the same prompts and weights
    # (rollout.full_determinism would seed every request alike: 4 equal responses per group). The
    # step's rewards, advantages and losses therefore differ, and are not compared.


# ---------------------------------------------------------------- a DataFlex-RL block, unchanged


def _hydra(value) -> str:
    """A YAML value written as a Hydra override value ({a: 1, b: [x, y]})."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_hydra(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    return str(value)


def reference_run() -> Run:
    """The README's DataFlex-RL select block, unchanged; its vLLM worker is killed once step 1 is logged."""
    reference = yaml.safe_load((ROOT / "tests" / "core" / "reference_blocks" / "blocks.yaml").read_text())
    entry = reference["readme_select"]
    return run_main_ppo(
        "reference",
        f"trainer.v1.trainer_mode={entry['trainer_mode']}",
        f"+dataflex={_hydra(entry['block'])}",
        steps=2,
        kill_worker_after_step=1,
    )


def test_reference_select_block_runs_unchanged():
    run = reference_run()
    metrics = run.step(1)
    assert 0.0 <= metrics["dataflex/kept_frac"] <= 1.0
    solve = [row["score"] for row in run.rollouts(1)]
    assert len(solve) == ROWS


# ---------------------------------------------------------------- a dead vLLM worker ends the run


def test_a_killed_vllm_worker_ends_the_run_within_a_minute_with_its_error():
    # Without scripts/verl_e2e/supervise.py verl's driver waits for the dead engine until the timeout.
    run = reference_run()
    assert run.killed.startswith("VLLM::Worker"), run.killed
    assert run.exit_code not in (0, "timeout"), f"the run exited {run.exit_code} after its vLLM worker was killed"
    assert run.ended_after_kill_s < KILL_GRACE_S, (
        f"the run took {run.ended_after_kill_s:.0f} s to end after its vLLM worker was killed"
    )
    # Whoever ended it (verl noticing the failed requests, or supervise.py after its grace), the run's last
    # words say that the engine failed and show the engine's own error: vLLM's word that its worker died.
    report = [line for line in run.log().splitlines() if line.startswith("[supervise]")]
    assert any("the run ended (exit" in line or "stopped the run" in line for line in report), report
    assert any("Worker proc" in line and "died" in line for line in report), report


# ---------------------------------------------------------------- verl's DAPO filter + pre_select


def test_dapo_filter_groups_refills_through_the_prompt_feed():
    run = run_main_ppo(
        "dapo",
        "trainer.v1.trainer_mode=dataflex_sync",
        dataflex_strategy("dapo_skip.yaml"),
        "algorithm.filter_groups.enable=True",
        "algorithm.filter_groups.metric=reward",
        # every `hard` group fails whole: the filter has groups to evict at every step
        "reward.custom_reward_function.name=compute_score_hard_unsolved",
        "trainer.save_freq=2",
    )
    count = lambda name: int(sum(run.step(s).get(f"training/filter_groups/{name}", 0) for s in (1, 2)))  # noqa: E731
    evicted, surplus = count("evicted_samples"), count("discarded_surplus_samples")
    assert evicted > 0, f"verl's filter evicted no group, so nothing was refilled: {run.metrics}"
    state = torch.load(run.out / "checkpoints" / "global_step_2" / "dataflex.pt", weights_only=True)
    drawn = state["strategy"]["pre_select"]["drawn"]
    # Every prompt verl generated came through the adapter's feed: the first batches, one refill per
    # evicted group, and the refills verl dispatched but discarded as surplus once the batch was full.
    assert drawn == 2 * PROMPTS + evicted + surplus, (drawn, evicted, surplus)


# ---------------------------------------------------------------- baseline == stock verl


def test_baseline_strategy_trains_as_stock_verl():
    # One step each: what is compared (prompts, metric names) shows at the first step, and CI's time
    # goes to the runs that test the adapter.
    stock = run_main_ppo("stock", "trainer.v1.trainer_mode=sync", steps=1)
    baseline = run_main_ppo("baseline", "trainer.v1.trainer_mode=dataflex_sync", "+dataflex.strategy=baseline", steps=1)
    for step in (1,):
        # Same seed, same prompts in the same steps; the same metrics, and no dataflex field written.
        assert Counter(r["input"] for r in baseline.rollouts(step)) == Counter(r["input"] for r in stock.rollouts(step))
        assert set(baseline.step(step)) == set(stock.step(step)), set(baseline.step(step)) ^ set(stock.step(step))
    # Measured difference: the values are not equal, because the responses are not. Two runs with the
    # same seed sample different responses (4 of 32 equal at step 1): vLLM's one sampler generator
    # serves whichever requests the agent loop's concurrent calls put in each batch, and that
    # batching follows timing. Rewards, advantages and losses then differ (step 1: 1488 vs 1489
    # tokens). The adapter's part is covered where it can be exact: tests/integrations/verl (same
    # loss and gradient as verl's own functions on one batch).


# ---------------------------------------------------------------- dataflex_colocate_async: verl's async trainer

ASYNC = (
    "trainer.v1.trainer_mode=dataflex_colocate_async",
    dataflex_strategy("async_select_mix_skip.yaml"),
    "trainer.save_freq=1",
)


def test_the_async_trainer_runs_every_part_and_logs_verls_own_staleness():
    run = run_main_ppo("async", *ASYNC, steps=3)
    assert "domains (column 'data_source'): easy, hard" in run.log()  # the train-start line of the strategy
    for step in (1, 2, 3):
        metrics = run.step(step)
        assert 0 <= metrics["dataflex/kept_frac"] <= 1 and "dataflex/mix/target/hard" in metrics, metrics
        # The strategy's staleness is verl's own count: versions lag by global_steps - 1 - max_global_steps.
        assert metrics["dataflex/staleness/mean"] == pytest.approx(
            metrics["training/off_policy/trajectory_staleness/mean"]
        ), (step, metrics)
        assert {"dataflex/staleness/mean/easy", "dataflex/staleness/mean/hard"} <= set(metrics), metrics
    # Generation runs a step ahead: from step 2 on, responses come from the previous weights.
    assert run.step(2)["training/off_policy/trajectory_staleness/max"] >= 1, run.step(2)
    state = torch.load(run.out / "checkpoints" / "global_step_2" / "dataflex.pt", weights_only=True)
    assert state["strategy"]["pre_select"]["drawn"] >= 2 * PROMPTS, state["strategy"]["pre_select"]


def test_the_async_trainer_resumes_its_strategy_from_a_checkpoint():
    full = run_main_ppo("async", *ASYNC, steps=3)
    checkpoint = full.out / "checkpoints" / "global_step_1"
    assert (checkpoint / "dataflex.pt").exists(), list(checkpoint.iterdir())
    resumed = run_main_ppo(
        "async_resumed", *ASYNC, "trainer.resume_mode=resume_path", f"trainer.resume_from_path={checkpoint}", steps=2
    )
    assert [row["step"] for row in resumed.metrics] == [2], [row["step"] for row in resumed.metrics]
    # The mix target of step 2 is computed from the restored strategy (step 1's statistics) before any new
    # rollout is seen; a fresh strategy would start from the even prior.
    assert "dataflex/mix/target/hard" in resumed.step(2)
    restored = torch.load(checkpoint / "dataflex.pt", weights_only=True)["strategy"]
    assert restored["pre_select"]["drawn"] >= PROMPTS, restored["pre_select"]


# ---------------------------------------------------------------- rollout allocation: pilot, commit, one group


def test_allocation_screens_with_pilots_and_trains_merged_groups_of_g():
    run = run_main_ppo("allocation", "trainer.v1.trainer_mode=dataflex_sync", "+dataflex.strategy=screen_greso")
    pilot = 2  # screen_greso's
    commits = 0.0
    for step in (1, 2):
        metrics = run.step(step)
        # Each step fills verl's batch: PROMPTS groups, each committed G - k completions after its pilot of k.
        assert metrics["dataflex/alloc/step_trained_groups"] == PROMPTS, metrics
        step_commits = metrics["dataflex/alloc/commit_completions"] - commits
        commits = metrics["dataflex/alloc/commit_completions"]
        assert step_commits == PROMPTS * (GROUP - pilot), metrics
        piloted = metrics["dataflex/alloc/step_generated"] - step_commits
        assert piloted >= PROMPTS * pilot and piloted % pilot == 0, metrics
        assert metrics["dataflex/alloc/screens"] >= 1 and "dataflex/alloc/forced_groups" in metrics, metrics
        # verl trained each prompt's pilot and commit as one group of G: keys {uid}_{s}_0 and {uid}_commit_{s}_0.
        groups = Counter()
        for row in run.rollouts(step):
            groups[(row["uid"].split("_", 1)[0], "_commit_" in row["uid"])] += 1
        assert len(groups) == 2 * PROMPTS, groups
        assert all(rows == (GROUP - pilot if commit else pilot) for (_, commit), rows in groups.items()), groups
    # The strategy saw the merged groups under one uid each (the uid field verl's advantage groups by).
    assert f"(of {2 * PROMPTS} groups)" in run.log(), run.log()[-2000:]
