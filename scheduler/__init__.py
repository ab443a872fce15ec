"""Whole networks: the gradient task scheduler, per-task budgets, the network tuning loop, build and report."""
