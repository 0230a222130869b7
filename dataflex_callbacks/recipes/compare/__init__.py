"""Fair comparison of strategies: matched seeds, one budget, paired intervals (``dataflex compare``).

```python
from dataflex_callbacks.recipes.compare import Budget, CompareSettings, run_grid, write_report

settings = CompareSettings(strategies=["baseline", "difffilter"], seeds=[0, 1, 2], budget=Budget.parse("steps:100"),
                           output_dir="runs/compare", jobs=2)
write_report(settings, run_grid(settings))   # report.md, results.csv, figures/*.png
```
"""

from .budget import Budget, GenerationLedger
from .grid import CompareInputError, CompareSettings, GridRun, execute_run, run_grid
from .report import write_report

__all__ = ["Budget", "CompareInputError", "CompareSettings", "GenerationLedger", "GridRun", "execute_run", "run_grid",
           "write_report"]
