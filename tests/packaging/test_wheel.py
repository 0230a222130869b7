"""The built wheel installs into a fresh venv and exposes the core and the adapters from there."""

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
def test_wheel_installs_and_imports_outside_the_repo(tmp_path):
    dist = tmp_path / "dist"
    # setuptools writes build/ and *.egg-info next to the sources: build from a copy, not the repo.
    source = tmp_path / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", "runs", ".hypothesis", "tests", "examples", "benchmarks"))
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(source)],
        env=env, cwd=tmp_path)
    wheels = list(dist.glob("dataflex_callbacks-*.whl"))
    assert len(wheels) == 1, list(dist.iterdir())

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    # The venv has no pip of its own: the outer pip installs into it with --python.
    run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheels[0])], env=env)

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    clean_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    probe = (
        "import dataflex_callbacks, dataflex_callbacks.integrations.trl as trl_adapter;"
        "print(dataflex_callbacks.__file__); print(trl_adapter.__file__)"
    )
    # The system site-packages hold the editable install too: the venv's copy must win.
    result = run([str(python), "-c", probe], cwd=outside, env=clean_env)
    core_file, adapter_file = (Path(line) for line in result.stdout.split())
    assert env_dir in core_file.parents and env_dir in adapter_file.parents, result.stdout
    assert REPO not in core_file.parents
