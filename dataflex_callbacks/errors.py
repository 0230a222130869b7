"""Exceptions raised by dataflex-callbacks; each message names the bad value and the fix."""


class DataFlexError(Exception):
    """Base class of every error this library raises on purpose."""


class ConfigError(DataFlexError, ValueError):
    """A strategy configuration is invalid: unknown name, bad parameter, missing signal."""


class BatchError(DataFlexError, ValueError):
    """A `RolloutBatch` (or its use) is inconsistent: wrong shape, dtype, device, missing field."""
