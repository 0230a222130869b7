"""examples/trl_grpo.py: a user's own TRL script runs end to end, and the dataflex/* metrics reach TensorBoard
through report_to.
"""

import os
import subprocess
import sys

import pytest

pytest.importorskip("trl")
pytest.importorskip("tensorboard")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "trl_grpo.py")
ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}


def tensorboard_scalars(folder) -> dict[str, list[float]]:
    """Every scalar TensorBoard's event files under ``folder`` hold: tag -> values in step order."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    scalars: dict[str, list[float]] = {}
    for directory, _, files in os.walk(folder):
        if any(name.startswith("events.out.tfevents") for name in files):
            events = EventAccumulator(directory)
            events.Reload()
            for tag in events.Tags()["scalars"]:
                scalars.setdefault(tag, []).extend(event.value for event in events.Scalars(tag))
    return scalars


def test_the_example_trains_and_its_strategy_metrics_reach_tensorboard(tmp_path):
    output_dir = tmp_path / "run"
    command = [sys.executable, SCRIPT, "--steps", "3", "--report-to", "tensorboard", "--output-dir", str(output_dir)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, **ENV}
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert (
        "dataflex: strategy 'diffband': select group_reward_variance -> threshold_band(low=0, high=inf); "
        "domains (column 'domain'): add, repeat"
    ) in result.stdout
    assert "trained 3 steps with strategy 'diffband'" in result.stdout

    scalars = tensorboard_scalars(output_dir)
    for tag in (
        "train/dataflex/kept_frac",
        "train/dataflex/dropped_all",
        "train/dataflex/selection_reward/add",
        "train/dataflex/selection_reward/repeat",
        "train/rewards/correct_answer/mean",
    ):
        assert len(scalars.get(tag, [])) == 3, (tag, sorted(scalars))
    assert all(0.0 <= value <= 1.0 for value in scalars["train/dataflex/kept_frac"])
