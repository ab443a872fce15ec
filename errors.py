"""Exception types that users may want to catch."""


class DrytuneError(Exception):
    """Base class of drytune's own errors."""


class UnsupportedProgramError(DrytuneError):
    """The tensor program uses something drytune cannot tune (e.g. dynamic shapes)."""


class InvalidCandidateError(DrytuneError):
    """A candidate that TVM rejects while replaying or building it; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# What TVM raises through its FFI: its error kinds map to Python built-ins (a kind with no Python class of its own,
# such as TVMError, becomes RuntimeError; ScheduleError and InternalError subclass RuntimeError). TVM 0.27 has no
# `tvm.TVMError`.
TVM_ERRORS: tuple[type[Exception], ...] = (RuntimeError, ValueError, TypeError, KeyError, IndexError)
