"""examples/colab_grpo_lora.py and .ipynb: in sync, a parameters cell papermill reads, and both run end to end
on a local tiny model and GSM8K-format file (the notebook as docs/colab.md's CPU recipe runs it, and with the
mixing variant).

The subprocess and cell limits catch a hang, not slowness: each is ten times or more what its run takes on an
idle machine, so a fresh clone on two cores shared with other jobs (load 10: about five times slower) still
finishes in half of it.
"""

import json
import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("trl")
pytest.importorskip("peft")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "examples", "colab_grpo_lora.py")
NOTEBOOK = os.path.join(ROOT, "examples", "colab_grpo_lora.ipynb")
BUILDER = os.path.join(ROOT, "scripts", "build_notebook.py")
COLAB_DOC = os.path.join(ROOT, "docs", "colab.md")
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


def test_papermill_reads_every_parameter_of_the_parameters_cell():
    """papermill skips a line it cannot parse (two `=`) with a warning: that parameter is then missing from
    `papermill --help-notebook` and its type is not inferred."""
    import nbformat
    import papermill

    notebook = nbformat.read(NOTEBOOK, as_version=4)
    (cell,) = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    namespace: dict = {}
    exec(cell.source, namespace)  # noqa: S102 - our own notebook's parameters cell
    assigned = {name for name in namespace if name.isupper()}
    inspected = papermill.inspect_notebook(NOTEBOOK)
    assert set(inspected) == assigned, f"papermill cannot read {sorted(assigned - set(inspected))}"
    assert inspected["N_TRAIN"]["default"] == "2000" and inspected["N_TRAIN"]["help"].startswith("training questions")


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


def cpu_recipe() -> str:
    """The bash block of docs/colab.md's section "On a CPU, without a GPU"."""
    with open(COLAB_DOC, encoding="utf-8") as handle:
        text = handle.read()
    found = re.search(r"^## On a CPU, without a GPU\n.*?^```bash\n(.*?)^```", text, re.S | re.M)
    assert found, "docs/colab.md has no '## On a CPU, without a GPU' section with a bash block"
    return found.group(1)


def test_the_cpu_recipe_of_the_docs_runs_the_notebook_as_written(tmp_path):
    """docs/colab.md's CPU recipe, run from a folder that holds examples/ as the repository does."""
    (tmp_path / "examples").symlink_to(os.path.join(ROOT, "examples"), target_is_directory=True)
    # `python` and `papermill` as the recipe names them: this interpreter's.
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", cpu_recipe()],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        env={**os.environ, **OFFLINE_ENV, "PATH": path},
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    metrics = check_run_outputs(tmp_path / "cpu_run" / "output", steps=2, domains=["gsm8k_small"])
    assert metrics["device"] == "cpu" and metrics["strategy"]["name"] == "difffilter"
    assert (tmp_path / "cpu_run" / "notebook.ipynb").exists()


def test_papermill_runs_the_mixing_variant_with_its_parameters(local_inputs, tmp_path, monkeypatch):
    """The mixing variant through papermill's own parameter injection (a cell after the `parameters` cell)."""
    import papermill

    for name, value in OFFLINE_ENV.items():
        monkeypatch.setenv(name, value)  # the kernel inherits the environment
    monkeypatch.delenv("MPLBACKEND", raising=False)  # keep the kernel's inline backend: the figure is an output
    output_dir = tmp_path / "notebook_run"
    parameters = {
        **SMALL_RUN,
        "MODEL": local_inputs["model"],
        "DATASET": local_inputs["gsm8k"],
        "MIX_DATASET": local_inputs["second"],
        "STEPS": 3,
        "OUTPUT_DIR": str(output_dir),
    }
    notebook = papermill.execute_notebook(
        NOTEBOOK,
        str(tmp_path / "executed.ipynb"),
        parameters=parameters,
        cwd=str(tmp_path),
        kernel_name="python3",
        progress_bar=False,
        start_timeout=300,  # papermill's 60 s would time a kernel's start on a loaded machine, not catch a hang
        execution_timeout=600,  # per cell; the whole test took 28 s at load 5 and 40 s at load 8 on 2 cores
    )

    injected = [cell for cell in notebook.cells if "injected-parameters" in cell.metadata.get("tags", [])]
    assert len(injected) == 1 and "MIX_DATASET = " in injected[0].source
    metrics = check_run_outputs(output_dir, steps=3, domains=["arith", "gsm8k_small"])
    assert metrics["strategy"]["mix"]["mixer"]["name"] == "dump_ucb"
    assert metrics["strategy"]["select"]["selector"]["name"] == "threshold_band"
    assert all("dataflex/mix/target/arith" in entry for entry in metrics["log_history"])
    plotted = [
        output for cell in notebook.cells for output in cell.get("outputs", []) if "image/png" in output.get("data", {})
    ]
    assert plotted, "the plot cell showed no figure"
