"""Splitting an assembly/PTX operand list, shared by the CPU and NVIDIA parsers."""

from __future__ import annotations


def split_operands(text: str) -> tuple[str, ...]:
    """Split an operand list on commas that are not inside (), [] or {}; empty operands are dropped."""
    if not text:
        return ()
    out, depth, cur = [], 0, []
    for ch in text:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur).strip())
    return tuple(o for o in out if o)
