"""Schedule primitives called without TVM's Python-side argument type checks, for replaying sketches.

TVM wraps every `Schedule` primitive in a checker that walks each argument against its type hints on every
call; when a candidate is replayed that checking costs more than the primitives themselves. Sketch steps
pass well-typed arguments, and the C++ side still validates everything it is given.
"""

from __future__ import annotations

from typing import Any

from tvm import s_tir


class UncheckedSchedule:
    """A view of a `Schedule` whose primitives skip the type-hint checks; everything else passes through."""

    __slots__ = ("schedule",)
    _raw: dict[str, Any] = {}  # primitive name -> the undecorated function (or None where there is none)

    def __init__(self, schedule: s_tir.Schedule):
        self.schedule = schedule

    def __getattr__(self, name: str) -> Any:
        raw = self._raw.get(name, False)
        if raw is False:
            raw = getattr(getattr(type(self.schedule), name, None), "__wrapped__", None)
            self._raw[name] = raw
        if raw is None:
            return getattr(self.schedule, name)
        return raw.__get__(self.schedule)


def unchecked(sch: s_tir.Schedule | UncheckedSchedule) -> UncheckedSchedule:
    """`sch` as an `UncheckedSchedule` (idempotent)."""
    return sch if isinstance(sch, UncheckedSchedule) else UncheckedSchedule(sch)


def raw_schedule(sch: s_tir.Schedule | UncheckedSchedule) -> s_tir.Schedule:
    """The TVM `Schedule` itself, for FFI functions that take one."""
    return sch.schedule if isinstance(sch, UncheckedSchedule) else sch
