"""A strategy's own recipe: run options one strategy trains with in place of the shared ones (``--strategy-recipe``).

Knapsack RL (arXiv 2509.25849) spreads plain GRPO's completions a step over more candidate prompts than plain GRPO
draws; Pilot-Commit (arXiv 2605.26606) runs at groups of 32; a strategy may have its own best learning rate.
``--strategy-recipe LABEL:key=value[,key=value]`` gives the strategy the comparison shows as LABEL its own
`RECIPE_KEYS`; the baseline keeps the shared recipe, and the strategy's runs are paired with the baseline's by seed as
any strategy's are, in the budget's unit. A batch shape of its own needs a completions budget: ``steps:N`` would give
that strategy other compute than the baseline.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from ..options import OPTION_RULES, check_option_text, check_run_options, option_flag

RECIPE_FLAG = "--strategy-recipe"
RECIPE_KEYS = ("prompts_per_step", "num_generations", "learning_rate")
"""The run options a strategy may set for itself: the batch shape and the learning rate."""
BATCH_SHAPE_KEYS = ("prompts_per_step", "num_generations")
EXAMPLE = f"{RECIPE_FLAG} knapsack_wide:prompts_per_step=32"


def parse_strategy_recipes(items, error: type) -> dict[str, dict]:
    """``LABEL:key=value[,key=value]`` texts (the flag, once per strategy) as ``{label: {key: text}}``; a mapping
    (from Python) is returned as it is. Raises `error` naming the text and the form it takes."""
    if items is None:
        return {}
    if isinstance(items, Mapping):
        wrong = [label for label, recipe in items.items() if not isinstance(recipe, Mapping)]
        if wrong:
            raise error(
                f"strategy_recipes maps a strategy to its run options, e.g. {{'knapsack_wide': {{'prompts_per_step': "
                f"32}}}}; got {items[wrong[0]]!r} for {wrong[0]!r}"
            )
        return {str(label): {str(k).replace("-", "_"): v for k, v in recipe.items()} for label, recipe in items.items()}
    if isinstance(items, str):
        items = [items]
    recipes: dict[str, dict] = {}
    for text in items:
        label, colon, pairs = str(text).partition(":")
        recipe = {}
        for pair in (p.strip() for p in pairs.split(",")):
            key, equals, value = pair.partition("=")
            if not equals or not key.strip() or not value.strip():
                recipe = None
                break
            recipe[key.strip().replace("-", "_")] = value.strip()
        if not colon or not label.strip() or not recipe:
            raise error(
                f"{RECIPE_FLAG} takes LABEL:key=value[,key=value] (LABEL: a strategy as the comparison names it), got "
                f"{text!r}; e.g. {EXAMPLE}"
            )
        if label.strip() in recipes:
            raise error(
                f"{RECIPE_FLAG} gives {label.strip()!r} two recipes; give each strategy one, its keys comma-separated"
            )
        recipes[label.strip()] = recipe
    return recipes


def check_strategy_recipes(settings, recipes: dict[str, dict], error: type) -> dict[str, tuple]:
    """Each recipe checked against `settings` (its labels, baseline, budget and shared run options):
    ``{label: ((key, value), ...)}``, keys in `RECIPE_KEYS` order, values by the options' own rules, a value equal to
    the shared one dropped. Refused, each with the fix: an unknown label or key, the baseline, and a batch shape of
    its own under a steps budget (a training function's comparison refuses the flag: `CompareSettings`)."""
    if not recipes:
        return {}
    labels = settings.labels()
    by_label = {**labels, **{label: label for label in labels.values()}}  # a strategy by its spec or its label
    checked: dict[str, tuple] = {}
    for name, recipe in recipes.items():
        label = by_label.get(name)
        if label is None:
            raise error(
                f"{RECIPE_FLAG} names {name!r}, which is not among the strategies ({', '.join(labels.values())}); "
                "name a strategy as the report does (a file by its `name:`)"
            )
        if label == labels[settings.baseline]:
            raise error(
                f"{RECIPE_FLAG} {name!r}: the baseline trains at the shared recipe, which every strategy is paired "
                f"with; set it with the shared flags ({', '.join(option_flag(k) for k in RECIPE_KEYS)})"
            )
        unknown = sorted(set(recipe) - set(RECIPE_KEYS))
        if unknown:
            raise error(
                f"{RECIPE_FLAG} {name!r}: {', '.join(unknown)} cannot differ between strategies; a strategy's own "
                f"recipe sets {', '.join(RECIPE_KEYS)}"
            )
        values = {
            key: check_option_text(
                f"{RECIPE_FLAG} {key}", recipe[key], dataclasses.replace(OPTION_RULES[key], optional=False), error
            )
            for key in RECIPE_KEYS
            if key in recipe
        }
        own = tuple((key, value) for key, value in values.items() if value != getattr(settings.base, key))
        if settings.budget.unit == "steps" and any(key in BATCH_SHAPE_KEYS for key, _ in own):
            raise error(
                f"{RECIPE_FLAG} {name!r} changes the batch shape, so under the budget {settings.budget} its runs would "
                "generate other completions than the baseline's; pass a completions budget (--budget completions:N)"
            )
        check_run_options(dataclasses.replace(settings.base, **dict(own)), error)
        if own:
            checked[label] = own
    return checked


def recipe_text(recipe) -> str:
    """A strategy's own recipe as the report and results.csv write it: ``prompts_per_step=32``; "" for none."""
    return ", ".join(f"{key}={value:g}" for key, value in dict(recipe or {}).items())
