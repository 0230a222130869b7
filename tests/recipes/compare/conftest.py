"""A real, tiny `dataflex compare` for the budget tests: one seed, one job, 4 prompts x 4 completions a step."""

import pytest

SMALL_RUN = ["--seeds", "0", "--no-progress", "--jobs", "1", "--prompts-per-step", "4", "--num-generations", "4"]


@pytest.fixture(scope="module")
def small_compare(tmp_path_factory):
    """``small_compare(name, strategies, budget, *flags)``: run `dataflex compare` in a fresh folder; its path."""
    from dataflex_callbacks.recipes.cli import main

    def run(name: str, strategies: str, budget: str, *flags: str):
        folder = tmp_path_factory.mktemp(name) / "cmp"
        args = ["compare", "--strategies", strategies, "--budget", budget, *SMALL_RUN, *flags]
        assert main([*args, "--output-dir", str(folder)]) == 0
        return folder

    return run
