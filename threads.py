"""How many threads TVM's CPU runtime uses: every usable core, as the cost model assumes.

On x86 TVM's runtime takes half the logical CPUs when neither TVM_NUM_THREADS nor OMP_NUM_THREADS is set (it
assumes two hardware threads per core), so a 2-core machine without SMT would run every kernel on one core
while the static model scored it for two. The pool is created lazily on the first parallel kernel, so setting
the variable before any kernel runs is enough; a value the user set is never changed.
"""

from __future__ import annotations

import os

ENV_VARS = ("TVM_NUM_THREADS", "OMP_NUM_THREADS")


def usable_cores() -> int:
    """CPUs this process may run on (its affinity mask), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return os.cpu_count() or 1


def default_runtime_threads() -> int:
    """Set TVM_NUM_THREADS to the usable cores unless the user set a thread count; returns the count in effect."""
    for var in ENV_VARS:
        value = os.environ.get(var, "").strip()
        if value.isdigit() and int(value) > 0:
            return int(value)
    n = usable_cores()
    os.environ["TVM_NUM_THREADS"] = str(n)
    return n


__all__ = ["default_runtime_threads", "usable_cores"]
