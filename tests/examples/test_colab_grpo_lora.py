"""examples/colab_grpo_lora.py and .ipynb: in sync, and both run end to end on a local tiny model and
GSM8K-format file.
"""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "colab_grpo_lora.py")
NOTEBOOK = os.path.join(ROOT, "examples", "colab_grpo_lora.ipynb")
BUILDER = os.path.join(ROOT, "scripts", "build_notebook.py")
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "OMP_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
}
# The smallest run that still has groups, gradient accumulation and an evaluation.
SMALL_RUN = {
    "STEPS": 2,
    "PROMPTS_PER_STEP": 2,
    "NUM_GENERATIONS": 4,
    "MICRO_BATCH": 4,
    "MAX_COMPLETION_LENGTH": 8,
    "N_TRAIN": 0,
    "N_EVAL": 4,
    "EVAL_BATCH_SIZE": 4,
}


def gsm8k_row(i: int) -> dict:
    """A GSM8K-format row: the solution ends in '#### <answer>'."""
    a, b = i + 2, i % 5 + 1
    return {
        "question": f"tom has {a} pens and buys {b} more. how many pens?",
        "answer": f"he has {a} + {b} = <<{a}+{b}={a + b}>>{a + b} pens.\n#### {a + b}",
    }


@pytest.fixture(scope="module")
def local_inputs(tmp_path_factory):
    """A saved tiny model (positions for GSM8K-length prompts), a GSM8K-format jsonl and a second-domain jsonl."""
    from dataflex_callbacks.recipes.tiny_model import save_tiny

    folder = tmp_path_factory.mktemp("colab_inputs")
    model = save_tiny(folder / "tiny_model", max_position_embeddings=256)
    gsm8k = folder / "gsm8k_small.jsonl"
    gsm8k.write_text("\n".join(json.dumps(gsm8k_row(i)) for i in range(16)) + "\n")
    second = folder / "arith.jsonl"
    second.write_text(
        "\n".join(json.dumps({"problem": f"what is {i} times 2?", "answer": str(2 * i)}) for i in range(12)) + "\n"
    )
    return {"model": model, "gsm8k": str(gsm8k), "second": str(second)}


def check_run_outputs(output_dir, steps: int, domains: list[str], strategy_logged: bool = True) -> dict:
    metrics = json.loads((output_dir / "metrics.json").read_text())
    assert metrics["steps"] == steps and len(metrics["step_seconds"]) == steps
    assert [entry["step"] for entry in metrics["log_history"]] == list(range(1, steps + 1))
    assert metrics["domains"] == domains
    assert set(metrics["accuracy_before"]) == set(domains) | {"overall"}
    assert set(metrics["accuracy_after"]) == set(domains) | {"overall"}
    if strategy_logged:
        assert all("dataflex/kept_frac" in entry for entry in metrics["log_history"])
    assert (output_dir / "lora_adapter" / "adapter_config.json").exists()
    assert (output_dir / "lora_adapter" / "adapter_model.safetensors").exists()
    assert (output_dir / "training.png").stat().st_size > 0
    return metrics


def test_notebook_is_generated_from_the_script():
    result = subprocess.run([sys.executable, BUILDER, "--check"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr + "\nrun: python scripts/build_notebook.py"


def test_parameters_cell_and_flags_name_the_same_parameters():
    import nbformat

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    tagged = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    assert len(tagged) == 1
    assigned = {line.split("=")[0].strip() for line in tagged[0].source.splitlines() if line and line[0].isupper()}
    namespace: dict = {}
    exec(tagged[0].source, namespace)  # noqa: S102 - our own notebook's parameters cell
    assert namespace["MODEL"] == "Qwen/Qwen2.5-0.5B-Instruct" and namespace["DATASET"] == "openai/gsm8k"
    assert namespace["DATASET_CONFIG"] == "main" and namespace["STRATEGY"] == "difffilter"
    result = subprocess.run(
        [sys.executable, SCRIPT, "--help"], capture_output=True, text=True, cwd=ROOT, env={**os.environ, **OFFLINE_ENV}
    )
    assert result.returncode == 0, result.stderr
    flags = {name for name in assigned if "--" + name.lower().replace("_", "-") in result.stdout}
    assert flags == assigned


def test_script_runs_end_to_end_with_local_model_and_dataset(local_inputs, tmp_path):
    output_dir = tmp_path / "run"
    flags = [f"--{name.lower().replace('_', '-')}={value}" for name, value in SMALL_RUN.items()]
    command = [
        sys.executable,
        SCRIPT,
        "--model",
        local_inputs["model"],
        "--dataset",
        local_inputs["gsm8k"],
        "--output-dir",
        str(output_dir),
        *flags,
    ]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, **OFFLINE_ENV}
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "reference solutions scored correct: 12/12" in result.stdout  # 16 rows, 4 held out
    metrics = check_run_outputs(output_dir, steps=2, domains=["gsm8k_small"])
    assert metrics["strategy"]["name"] == "difffilter" and metrics["precision"] == "fp32"


def test_notebook_executes_headless_with_injected_parameters(local_inputs, tmp_path, monkeypatch):
    """The mixing variant, as papermill would run it: overrides in a cell after the `parameters` cell."""
    import nbformat
    from nbclient import NotebookClient

    for name, value in OFFLINE_ENV.items():
        monkeypatch.setenv(name, value)  # the kernel inherits the environment
    monkeypatch.delenv("MPLBACKEND", raising=False)  # keep the kernel's inline backend: the figure is an output
    output_dir = tmp_path / "notebook_run"
    overrides = {
        **SMALL_RUN,
        "MODEL": local_inputs["model"],
        "DATASET": local_inputs["gsm8k"],
        "MIX_DATASET": local_inputs["second"],
        "STEPS": 3,
        "OUTPUT_DIR": str(output_dir),
    }
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    position = next(i for i, cell in enumerate(notebook.cells) if "parameters" in cell.metadata.get("tags", []))
    injected = nbformat.v4.new_code_cell(
        "\n".join(f"{name} = {value!r}" for name, value in overrides.items()),
        metadata={"tags": ["injected-parameters"]},
    )
    notebook.cells.insert(position + 1, injected)
    NotebookClient(
        notebook, kernel_name="python3", timeout=300, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    metrics = check_run_outputs(output_dir, steps=3, domains=["arith", "gsm8k_small"])
    assert metrics["strategy"]["mix"]["mixer"]["name"] == "dump_ucb"
    assert metrics["strategy"]["select"]["selector"]["name"] == "threshold_band"
    assert all("dataflex/mix/target/arith" in entry for entry in metrics["log_history"])
    plotted = [
        output for cell in notebook.cells for output in cell.get("outputs", []) if "image/png" in output.get("data", {})
    ]
    assert plotted, "the plot cell showed no figure"
