"""Fair comparison of strategies: matched seeds, one budget, paired intervals (``dataflex compare``).

```python
from dataflex_callbacks.recipes.compare import compare

results = compare(["baseline", "difffilter"], reward_funcs=["my_rewards:correct"], seeds=3, budget="steps:100")
results.runs          # one dict per run, as in results.csv
results.differences   # per strategy: paired difference to the baseline, interval, p-value
```

Or step by step:

```python
from dataflex_callbacks.recipes.compare import Budget, CompareSettings, run_grid, write_report

settings = CompareSettings(strategies=["baseline", "difffilter"], seeds=[0, 1, 2], budget=Budget.parse("steps:100"),
                           output_dir="runs/compare", jobs=2)
write_report(settings, run_grid(settings))   # report.md, results.csv, figures/*.png
```

Your own training loop (Lightning, verl, plain PyTorch): ``compare(strategies, seeds=2, budget="completions:4096",
train=my_train)`` calls ``my_train(run)`` (a `TrainingRun`) once per strategy and seed; see docs/compare.md.
"""

from .api import ComparisonResults, compare, run_comparison
from .budget import Budget, GenerationLedger
from .grid import CompareInputError, CompareSettings, GridRun, execute_run, run_grid
from .held_out_pass_rate import held_out_pass_rate
from .report import write_report
from .training_run import TrainingRun, TrainingRunError

__all__ = [
    "ComparisonResults",
    "compare",
    "run_comparison",
    "Budget",
    "CompareInputError",
    "CompareSettings",
    "GenerationLedger",
    "GridRun",
    "TrainingRun",
    "TrainingRunError",
    "execute_run",
    "held_out_pass_rate",
    "run_grid",
    "write_report",
]
