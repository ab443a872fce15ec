"""Factorizations of loop extents: the domain of tile-size holes."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """All divisors of n in increasing order."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return tuple(small + large[::-1])


@functools.lru_cache(maxsize=4096)
def prime_factors(n: int) -> tuple[int, ...]:
    """Prime factors of n with multiplicity, increasing."""
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return tuple(out)


@functools.lru_cache(maxsize=4096)
def count_factorizations(extent: int, parts: int, max_innermost: int) -> int:
    """Number of ordered factorizations of `extent` into `parts` factors, innermost <= max_innermost."""
    if parts <= 1:
        return 1

    @functools.cache
    def free(n: int, k: int) -> int:
        if k == 1:
            return 1
        return sum(free(n // d, k - 1) for d in divisors(n))

    return sum(free(extent // d, parts - 1) for d in divisors(extent) if d <= max_innermost)
