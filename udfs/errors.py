"""Typed errors shared by every layer.

Each message names the broken invariant and the fix, so a data engineer reading a failed job's
log knows what to change without a stack trace. Tests match on these messages.
"""

from __future__ import annotations


class TrajprivError(Exception):
    """Base of every error the product raises on purpose (a clear message, no stack needed)."""


class ConfigError(TrajprivError):
    """A configuration key or value is wrong; the message names the key."""


class InvalidTrajectoryError(TrajprivError):
    """A trajectory or location set breaks the input contract of a mechanism."""


class InvalidParameterError(TrajprivError):
    """A mechanism parameter (epsilon, granularity, max_len, ...) is out of its valid range."""


class BudgetExceededError(TrajprivError):
    """A release would spend more privacy budget than remains; says requested and remaining."""


class InputDataError(TrajprivError):
    """An input path, file or table is missing, empty or unreadable; names the file and why."""
