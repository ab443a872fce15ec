"""Budgets: a network's global budget and per-task limits, from a Python dict or a TOML/JSON file.

A configuration looks like (TOML)::

    budget = "10m"                   # or "2000 trials"
    [tasks."fused_conv2d*"]          # a name pattern (fnmatch) or a task index
    min_trials = 64
    max_seconds = 90
    strategy = "cmaes"
    [tasks.3]
    skip = true

Rules apply in the order given; a later rule overrides the fields it sets for the tasks it matches.
"""

from __future__ import annotations

import fnmatch
import json
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from ..errors import DrytuneError

STRATEGY_NAMES = ("portfolio", "evolutionary", "cmaes", "random")
_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(h|min|m|sec|s)")


class BudgetError(DrytuneError, ValueError):
    """A budget configuration that cannot be applied (unknown task, negative or contradictory limits)."""


def parse_seconds(value: str | float | int) -> float:
    """Seconds from a number or a duration string such as "90s", "10m", "1h30m"."""
    if isinstance(value, bool):
        raise BudgetError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = str(value).strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(\.\d+)?", text):
            seconds = float(text)
        else:
            parts = _PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise BudgetError(f"not a duration: {value!r} (examples: 90s, 10m, 1h30m)")
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds < 0:
        raise BudgetError(f"a duration must be a non-negative number of seconds, got {value!r}")
    return seconds


@dataclass(frozen=True)
class Budget:
    """A global budget: wall-clock seconds and/or scored trials; tuning stops at whichever comes first."""

    seconds: float | None = None
    trials: int | None = None

    def __post_init__(self) -> None:
        if self.seconds is None and self.trials is None:
            raise BudgetError("a budget needs seconds or trials")
        if self.seconds is not None and self.seconds < 0:
            raise BudgetError(f"negative budget: {self.seconds} s")
        if self.trials is not None and self.trials < 0:
            raise BudgetError(f"negative budget: {self.trials} trials")

    @classmethod
    def parse(cls, value: Budget | str | float | int | Mapping[str, Any]) -> Budget:
        """From "10m" / 600 (seconds), "2000 trials", or {"seconds": ..., "trials": ...}."""
        if isinstance(value, Budget):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"seconds", "trials"}
            if unknown:
                raise BudgetError(f"unknown budget key(s) {sorted(unknown)}; use seconds and/or trials")
            secs = value.get("seconds")
            trials = value.get("trials")
            return cls(parse_seconds(secs) if secs is not None else None,
                       _non_negative_int(trials, "trials") if trials is not None else None)
        if isinstance(value, str):
            m = re.fullmatch(r"\s*(\d+)\s*(trials?|t)\s*", value.lower())
            if m:
                return cls(trials=int(m.group(1)))
        return cls(seconds=parse_seconds(value))

    def __str__(self) -> str:
        parts = []
        if self.seconds is not None:
            parts.append(f"{self.seconds:g} s")
        if self.trials is not None:
            parts.append(f"{self.trials} trials")
        return " or ".join(parts)


def _non_negative_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
        raise BudgetError(f"{what} must be a whole number, got {value!r}")
    if value < 0:
        raise BudgetError(f"{what} must not be negative, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class TaskBudget:
    """Limits for one task; None means no limit. `weight` overrides the task's call count in the objective."""

    min_trials: int | None = None
    max_trials: int | None = None
    min_seconds: float | None = None
    max_seconds: float | None = None
    skip: bool = False
    weight: float | None = None
    strategy: str | None = None

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], where: str) -> dict[str, Any]:
        """The fields a rule sets, validated (only those present, so later rules override just them)."""
        names = {f.name for f in fields(cls)}
        unknown = set(raw) - names
        if unknown:
            raise BudgetError(f"{where}: unknown key(s) {sorted(unknown)}; valid keys: {', '.join(sorted(names))}")
        out: dict[str, Any] = {}
        for key, value in raw.items():
            if key in ("min_trials", "max_trials"):
                out[key] = _non_negative_int(value, f"{where}: {key}")
            elif key in ("min_seconds", "max_seconds"):
                out[key] = parse_seconds(value) if not isinstance(value, bool) else _bad(where, key, value)
            elif key == "skip":
                if not isinstance(value, bool):
                    _bad(where, key, value)
                out[key] = value
            elif key == "weight":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
                    raise BudgetError(f"{where}: weight must be a non-negative number, got {value!r}")
                out[key] = float(value)
            elif key == "strategy":
                if value not in STRATEGY_NAMES:
                    raise BudgetError(f"{where}: unknown strategy {value!r}; choose one of {', '.join(STRATEGY_NAMES)}")
                out[key] = value
        return out

    def check(self, name: str) -> None:
        for lo, hi, unit in (("min_trials", "max_trials", "trials"), ("min_seconds", "max_seconds", "s")):
            a, b = getattr(self, lo), getattr(self, hi)
            if a is not None and b is not None and a > b:
                raise BudgetError(f"task {name!r}: {lo} = {a} {unit} exceeds {hi} = {b} {unit}")
        if self.skip and (self.min_trials or self.min_seconds):
            raise BudgetError(f"task {name!r}: skip contradicts a minimum budget")


def _bad(where: str, key: str, value: Any) -> Any:
    raise BudgetError(f"{where}: invalid value {value!r} for {key}")


@dataclass(frozen=True)
class BudgetConfig:
    """A global budget plus per-task rules, keyed by a task name pattern (fnmatch) or a task index."""

    budget: Budget | None = None
    rules: tuple[tuple[str | int, dict[str, Any]], ...] = field(default_factory=tuple)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> BudgetConfig:
        """From {"budget": "10m", "tasks": {pattern_or_index: {...}}}; a dict without those keys is the tasks part."""
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise BudgetError(f"a budget configuration is a mapping, got {type(raw).__name__}")
        if set(raw) <= {"budget", "tasks"}:
            top, tasks = raw, raw.get("tasks") or {}
        else:
            top, tasks = {}, raw
        if not isinstance(tasks, Mapping):
            raise BudgetError("'tasks' must map task name patterns or indices to limits")
        rules = []
        for key, limits in tasks.items():
            if not isinstance(limits, Mapping):
                raise BudgetError(f"task rule {key!r}: expected a table of limits, got {limits!r}")
            selector: str | int = int(key) if isinstance(key, int) or str(key).isdigit() else str(key)
            rules.append((selector, TaskBudget.from_mapping(limits, f"task rule {key!r}")))
        budget = Budget.parse(top["budget"]) if top.get("budget") is not None else None
        return cls(budget, tuple(rules))

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> BudgetConfig:
        """From a .toml or .json file."""
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError as err:
            raise BudgetError(f"cannot read budget file {path}: {err.strerror}") from None
        try:
            if path.endswith(".json"):
                raw = json.loads(data)
            else:
                try:
                    import tomllib
                except ModuleNotFoundError:  # Python 3.10
                    import tomli as tomllib
                raw = tomllib.loads(data.decode())
        except (ValueError, UnicodeDecodeError) as err:
            raise BudgetError(f"{path}: not valid {'JSON' if path.endswith('.json') else 'TOML'}: {err}") from None
        return cls.from_dict(raw)

    @classmethod
    def coerce(cls, value: BudgetConfig | Mapping[str, Any] | str | os.PathLike | None) -> BudgetConfig:
        if isinstance(value, BudgetConfig):
            return value
        if isinstance(value, (str, os.PathLike)):
            return cls.from_file(value)
        return cls.from_dict(value)

    def resolve(self, task_names: Sequence[str]) -> list[TaskBudget]:
        """One `TaskBudget` per task; a rule that selects no task is an error that lists the valid names."""
        merged: list[dict[str, Any]] = [{} for _ in task_names]
        for selector, limits in self.rules:
            if isinstance(selector, int):
                if not 0 <= selector < len(task_names):
                    raise BudgetError(f"task index {selector} is out of range: there are {len(task_names)} tasks "
                                      f"(0..{len(task_names) - 1}):\n{_listing(task_names)}")
                hits = [selector]
            else:
                hits = [i for i, n in enumerate(task_names) if fnmatch.fnmatchcase(n, selector)]
                if not hits:
                    raise BudgetError(f"task pattern {selector!r} matches no task; the tasks are:\n"
                                      f"{_listing(task_names)}")
            for i in hits:
                merged[i].update(limits)
        out = []
        for name, fields_set in zip(task_names, merged, strict=True):
            tb = replace(TaskBudget(), **fields_set)
            tb.check(name)
            out.append(tb)
        return out


def _listing(names: Sequence[str]) -> str:
    return "\n".join(f"  {i:3d}  {n}" for i, n in enumerate(names))
