"""One exception hierarchy for infertune; the CLI maps it to exit codes.

    InfertuneError
     ├── UserError                 exit 1: bad input, explained in one line with the fix
     │    ├── ConfigError          a scenario / config / policy value is invalid
     │    ├── ModelLoadError       a model reference cannot be resolved or loaded
     │    ├── DataError            a held-out data file is missing, empty or malformed
     │    ├── NotApplicableError   an optimization does not apply to this model or hardware
     │    ├── IncompatibleInputError  data does not fit the model's inputs
     │    └── QualityFloorError    a quality floor is malformed or unmet where it must hold
     ├── NotBuiltError             exit 2: the command exists in the interface, not yet in code
     └── InternalError             exit 3: a bug or an environment failure; see the log

Messages state the rule and the fix, e.g. "max_length must be <= 512, the model's position
limit; pass --max-length 512". Lower-level errors are wrapped with ``raise ... from exc``.
"""

from __future__ import annotations


class InfertuneError(Exception):
    """Base of every error infertune raises on purpose."""

    exit_code = 3


class UserError(InfertuneError):
    exit_code = 1


class ConfigError(UserError):
    pass


class ModelLoadError(UserError):
    pass


class DataError(UserError):
    pass


class NotApplicableError(UserError):
    pass


class IncompatibleInputError(UserError):
    pass


class QualityFloorError(UserError):
    pass


class NotBuiltError(InfertuneError):
    exit_code = 2


class InternalError(InfertuneError):
    exit_code = 3
