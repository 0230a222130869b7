"""The built wheel installs into a fresh venv and exposes the core and the adapters from there.

It must pass whether pytest runs in a system Python or inside a virtual environment (as the
README's `python3 -m venv .venv && . .venv/bin/activate && bash scripts/test.sh` does). The inner
venv therefore sees the packages of the interpreter running the tests (torch, trl, ...) through a
`.pth` file listing that interpreter's site-packages, not through `--system-site-packages`, which
from inside a venv would point at the base Python, where torch may not be installed.
"""

import importlib.util
import os
import shutil
import site
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def outer_site_packages() -> list[str]:
    """The site-packages folders of the interpreter running the tests (a venv's own, or the system's)."""
    folders = list(site.getsitepackages())
    if site.ENABLE_USER_SITE and os.path.isdir(site.getusersitepackages()):
        folders.append(site.getusersitepackages())
    return [f for f in folders if os.path.isdir(f)]


def can_build_without_isolation() -> bool:
    """True when this interpreter has the build backend pyproject.toml asks for (setuptools >= 77, wheel).

    A fresh venv on Python 3.12 has no setuptools, one on 3.11 an older one: pip then builds in an
    isolated environment, fetching them from the configured index as `pip install -e .` just did.
    """
    if importlib.util.find_spec("setuptools") is None or importlib.util.find_spec("wheel") is None:
        return False
    import setuptools

    return int(setuptools.__version__.split(".")[0]) >= 77


def run(cmd, **kwargs):
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.slow
def test_wheel_installs_and_imports_outside_the_repo(tmp_path):
    dist = tmp_path / "dist"
    # setuptools writes build/ and *.egg-info next to the sources: build from a copy, not the repo.
    source = tmp_path / "source"
    shutil.copytree(
        REPO,
        source,
        ignore=shutil.ignore_patterns(
            ".git",
            ".venv*",
            "build",
            "dist",
            "*.egg-info",
            "__pycache__",
            "runs",
            ".hypothesis",
            "tests",
            "examples",
            "benchmarks",
        ),
    )
    env = dict(os.environ, PIP_NO_INPUT="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    isolation = ["--no-build-isolation"] if can_build_without_isolation() else []
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", str(dist), str(source)],
        env=env,
        cwd=tmp_path,
    )
    wheels = list(dist.glob("dataflex_callbacks-*.whl"))
    assert len(wheels) == 1, list(dist.iterdir())
    # PEP 561: without py.typed a user's type checker treats the installed package as untyped.
    with zipfile.ZipFile(wheels[0]) as wheel:
        assert "dataflex_callbacks/py.typed" in wheel.namelist()

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(system_site_packages=False, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    inner_site = run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # Appended after the venv's own site-packages: the installed wheel wins over anything outside.
    Path(inner_site, "outer_environment.pth").write_text("\n".join(outer_site_packages()) + "\n")
    # The venv has no pip of its own: the outer pip installs into it with --python.
    run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", str(wheels[0])],
        env=env,
    )

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    clean_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    probe = (
        "import dataflex_callbacks, dataflex_callbacks.integrations.trl as trl_adapter;"
        "print(dataflex_callbacks.__file__); print(trl_adapter.__file__)"
    )
    # The outer site-packages may hold an editable install too: the venv's copy must win.
    result = run([str(python), "-c", probe], cwd=outside, env=clean_env)
    core_file, adapter_file = (Path(line) for line in result.stdout.split())
    assert env_dir in core_file.parents and env_dir in adapter_file.parents, result.stdout
    assert REPO not in core_file.parents
