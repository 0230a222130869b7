"""Validation of user-given domain proportions (static priors, sampler targets)."""

from __future__ import annotations

import math
from typing import Mapping, Sequence

from .errors import ConfigError


def check_proportions(proportions: Mapping[str, float], domains: Sequence[str], what: str = "proportions") -> dict[str, float]:
    """Return ``proportions`` as ``{domain: float}`` over exactly ``domains``, or raise `ConfigError`.

    Every domain must be present, none unknown, all values finite and >= 0, summing to 1 (1e-6).
    """
    given = {str(k): v for k, v in dict(proportions).items()}
    unknown = sorted(set(given) - set(domains))
    if unknown:
        raise ConfigError(f"{what}: unknown domain(s) {unknown}; known domains: {list(domains)}")
    missing = [d for d in domains if d not in given]
    if missing:
        raise ConfigError(f"{what}: no proportion for domain(s) {missing}; give one for each of {list(domains)}")
    values = {}
    for d in domains:
        value = given[d]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise ConfigError(f"{what}: proportion of {d!r} must be a finite number; got {value!r}")
        if value < 0:
            raise ConfigError(f"{what}: proportion of {d!r} is negative ({value}); proportions must be >= 0")
        values[d] = float(value)
    total = sum(values.values())
    if abs(total - 1.0) > 1e-6:
        raise ConfigError(f"{what}: proportions sum to {total:.6g}, not 1; normalise them (e.g. divide each by {total:.6g})")
    return values
