"""Validation of user-given domain lists and proportions (mix domains, static priors, sampler targets)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dataflex_callbacks._plain_values import plain_scalar
from dataflex_callbacks.errors import ConfigError


def check_domains(domains: Any, what: str = "domains") -> list[str]:
    """``domains`` as a list of unique, non-empty string labels, or raise `ConfigError`.

    A single string is one domain (``domains: math`` means ``[math]``, never ``m, a, t, h``).
    Integer labels are accepted as their string form (the samplers compare ``str(label)``);
    ``None``, floats, booleans and containers are refused.
    """
    if isinstance(domains, str):
        domains = [domains]
    if isinstance(domains, Mapping) or not hasattr(domains, "__iter__"):
        raise ConfigError(f"{what} must be a list of domain names, e.g. [math, code]; got {domains!r}")
    labels = []
    for item in domains:
        item = plain_scalar(item)
        if isinstance(item, bool) or not isinstance(item, (str, int)):
            raise ConfigError(f"{what}: every domain must be a non-empty string; got {item!r} in {list(domains)!r}")
        label = str(item)
        if not label.strip():
            raise ConfigError(f"{what}: domain names must be non-empty; got {label!r} in {list(domains)!r}")
        labels.append(label)
    if not labels:
        raise ConfigError(
            f"{what} is empty; list at least one domain, or leave it unset to take the domains from the data"
        )
    duplicates = sorted({d for d in labels if labels.count(d) > 1})
    if duplicates:
        raise ConfigError(f"{what} must be unique; {duplicates} appear more than once in {labels}")
    return labels


def check_proportions_form(proportions: Any, what: str = "proportions") -> dict | list:
    """A copy of ``proportions`` if it has the form of proportions (a mapping or a list), else a `ConfigError`.

    For proportions given before the domains are known; `check_proportions` checks the values once they are.
    """
    if isinstance(proportions, Mapping):
        return dict(proportions)
    if isinstance(proportions, str) or not hasattr(proportions, "__len__"):
        raise ConfigError(
            f"{what} must be a mapping {{domain: proportion}} or a list in domain order; got {proportions!r}"
        )
    return list(proportions)


def check_proportions(proportions: Any, domains: Sequence[str], what: str = "proportions") -> dict[str, float]:
    """Return ``proportions`` as ``{domain: float}`` over exactly ``domains``, or raise `ConfigError`.

    Either a mapping ``{domain: p}`` or a list in the order of ``domains`` (the DataFlex-RL
    form). Every domain must be present, none unknown, all values finite numbers (numpy and
    0-d torch numbers included) and >= 0, summing to 1 (1e-6).
    """
    domains = list(domains)
    if isinstance(proportions, Mapping):
        given = {str(k): v for k, v in proportions.items()}
    elif isinstance(proportions, str) or not hasattr(proportions, "__len__"):
        raise ConfigError(
            f"{what} must be a mapping {{domain: proportion}} or a list in domain order {domains}; got {proportions!r}"
        )
    else:
        listed = list(proportions)
        if len(listed) != len(domains):
            raise ConfigError(
                f"{what}: the list has {len(listed)} value(s) but there are {len(domains)} domain(s) "
                f"{domains}; give one proportion per domain in that order, or a mapping {{domain: p}}"
            )
        given = dict(zip(domains, listed, strict=True))
    unknown = sorted(set(given) - set(domains))
    if unknown:
        raise ConfigError(f"{what}: unknown domain(s) {unknown}; known domains: {domains}")
    missing = [d for d in domains if d not in given]
    if missing:
        raise ConfigError(f"{what}: no proportion for domain(s) {missing}; give one for each of {domains}")
    values: dict[str, float] = {}
    for d in domains:
        value = plain_scalar(given[d])
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(float(value)):
            raise ConfigError(f"{what}: proportion of {d!r} must be a finite number; got {given[d]!r}")
        if value < 0:
            raise ConfigError(f"{what}: proportion of {d!r} is negative ({value}); proportions must be >= 0")
        values[d] = float(value)
    total = sum(values.values())
    if abs(total - 1.0) > 1e-6:
        hint = f" (e.g. {[round(v / total, 6) for v in values.values()]})" if total > 0 else ""
        raise ConfigError(f"{what}: proportions sum to {total:.6g}, not 1; normalise them{hint}")
    return values
