"""The testbed: graded verifiable tasks and a small pretrained model that starts with a realistic spread.

Real RL fine-tuning starts from a model that solves some prompts always, some never and many
sometimes; the testbed reproduces that on a CPU. Its pieces:

- the tasks (`LEVELS`, `testbed_rows`, `testbed_dataset`, `write_jsonl`): arithmetic and digit sorting
  at graded levels (the domains), with `pretrain` / `train` / `calibration` / `eval` splits that never
  share a prompt;
- the verifier (`verify`) and TRL reward (`testbed_reward`): exact answers only;
- the shipped model (`load_testbed_model_path`), rebuilt by ``python scripts/build_testbed_model.py``
  (`BuildSettings`, `pretrain`);
- its profile (`pass_counts`, `profile_table`): greedy accuracy and pass rates over k samples per level.

docs/testbed.md has the measured profile, the GRPO gain on it and the commands.

    dataflex run --strategy none --model "$(python -c 'from dataflex_callbacks.recipes.testbed import \
        load_testbed_model_path as p; print(p())')" --dataset train.jsonl --eval-dataset eval.jsonl --verifier exact
"""

from ._datasets import (
    EVAL_ROWS,
    HEADLINE_LEVELS,
    OTHER_LEVEL_ROWS,
    SPLIT_ROWS,
    TRAIN_ROWS,
    default_rows,
    testbed_dataset,
    write_jsonl,
)
from ._model import MODEL_CONFIG, BuildSettings, build_tokenizer, pretrain, save_model
from ._profile import ANSWER_TOKENS, format_table, greedy_completions, greedy_correct, pass_counts, profile_table
from ._shipped_model import MODEL_FOLDER, TestbedModelMissing, load_testbed_model_path
from ._tasks import (
    LEVELS,
    SPLITS,
    Level,
    level_rows,
    levels_short_of,
    slipped_answer,
    split_capacity,
    split_of,
    testbed_rows,
)
from ._verify import testbed_reward, verify

__all__ = [
    "ANSWER_TOKENS",
    "BuildSettings",
    "EVAL_ROWS",
    "HEADLINE_LEVELS",
    "TestbedModelMissing",
    "LEVELS",
    "Level",
    "MODEL_CONFIG",
    "MODEL_FOLDER",
    "OTHER_LEVEL_ROWS",
    "SPLITS",
    "SPLIT_ROWS",
    "TRAIN_ROWS",
    "build_tokenizer",
    "default_rows",
    "format_table",
    "greedy_completions",
    "greedy_correct",
    "level_rows",
    "levels_short_of",
    "load_testbed_model_path",
    "pass_counts",
    "pretrain",
    "profile_table",
    "save_model",
    "slipped_answer",
    "split_capacity",
    "split_of",
    "testbed_dataset",
    "testbed_reward",
    "testbed_rows",
    "verify",
    "write_jsonl",
]
