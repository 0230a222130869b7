"""An optional cost model: one more unit of compute to target, "modelled cost", set with ``--cost-model``.

``--cost-model gen_token=1.0,train_token=0.3`` says that on the user's hardware generating one completion token
costs 1.0 and training on one costs 0.3 (relative seconds, or any unit: only ratios between strategies are
reported). Each curve point's modelled cost is then ``gen_token * completion_tokens + train_token *
trained_tokens``, and the headline gives the modelled cost to reach each level beside the measured units.

What it assumes: cost is linear in tokens (no batching effects, no quadratic attention term, prompt tokens
free); no fixed cost per optimizer step, per generation round or per evaluation; a trained token costs the same
whatever the sequence it is in; generated tokens are all the completions generated (every dynamic-sampling
round), trained tokens those of the responses the strategy kept (`budget.GenerationLedger`). It only changes
the report, so a changed cost model reuses the finished runs (`CompareSettings.shared` leaves it out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dataflex_callbacks.errors import InputError

MODELLED_COST = "modelled_cost"
"""The curve point field `with_modelled_cost` adds."""
EXAMPLE = "--cost-model gen_token=1.0,train_token=0.3"


class CostModelError(InputError):
    """A ``--cost-model`` that cannot be read: a missing, unknown, repeated or negative weight, or both 0."""


@dataclass(frozen=True)
class CostModel:
    """Relative cost of one generated and one trained completion token.

    Attributes:
        gen_token: cost of generating one completion token (>= 0).
        train_token: cost of training on one kept completion token (>= 0); not both 0.
    """

    gen_token: float
    train_token: float

    def __post_init__(self):
        for name in ("gen_token", "train_token"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise CostModelError(
                    f"--cost-model {name}={value} is not a finite number >= 0; pass relative costs per token, "
                    f"e.g. {EXAMPLE}"
                )
        if self.gen_token == 0 and self.train_token == 0:
            raise CostModelError(f"--cost-model needs a weight above 0 (both are 0); e.g. {EXAMPLE}")

    @classmethod
    def parse(cls, text: str) -> CostModel:
        """Read ``gen_token=1.0,train_token=0.3``; raises `CostModelError` naming the bad part and the fix."""
        weights: dict[str, float] = {}
        for part in (p.strip() for p in str(text).split(",")):
            name, sep, value = (s.strip() for s in part.partition("="))
            if not sep or not name:
                raise CostModelError(f"cannot read {part!r} in --cost-model {text!r}; write name=value, e.g. {EXAMPLE}")
            if name not in ("gen_token", "train_token"):
                raise CostModelError(
                    f"--cost-model has no weight {name!r}; the weights are gen_token and train_token, e.g. {EXAMPLE}"
                )
            if name in weights:
                raise CostModelError(f"--cost-model gives {name} twice; give each weight once, e.g. {EXAMPLE}")
            try:
                weights[name] = float(value)
            except ValueError:
                raise CostModelError(
                    f"--cost-model {name}={value!r} is not a number; pass relative costs per token, e.g. {EXAMPLE}"
                ) from None
        missing = [n for n in ("gen_token", "train_token") if n not in weights]
        if missing:
            raise CostModelError(f"--cost-model lacks {' and '.join(missing)}; give both weights, e.g. {EXAMPLE}")
        return cls(**weights)

    def cost(self, point: dict) -> float | None:
        """The modelled cost of a curve point; None when it lacks generated or trained tokens."""
        generated, trained = point.get("completion_tokens"), point.get("trained_tokens")
        if not isinstance(generated, (int, float)) or not isinstance(trained, (int, float)):
            return None
        return self.gen_token * generated + self.train_token * trained

    def __str__(self) -> str:
        return f"{self.gen_token:g} per generated token, {self.train_token:g} per trained token"


def with_modelled_cost(records: list[dict], cost_model: CostModel | None) -> list[dict]:
    """`records` with each curve point's `MODELLED_COST` added (copies; the records are not changed); as they are
    without a cost model. A point lacking its tokens (a result written before trained tokens were recorded) gets
    none, so the axis reads "n/a (not recorded)"."""
    if cost_model is None:
        return records
    out = []
    for record in records:
        curve = []
        for point in record["curve"]:
            cost = cost_model.cost(point)
            curve.append(point if cost is None else {**point, MODELLED_COST: cost})
        out.append({**record, "curve": curve})
    return out
