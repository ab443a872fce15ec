"""Shared fixtures: a real two-node Ray cluster on this machine for tests that tune on a cluster."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # test-support modules (ray_cluster) beside the tests

from ray_cluster import local_cluster  # noqa: E402


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[str]:
    """The address ("127.0.0.1:<port>") of a two-node Ray cluster, one CPU per node, for the tests of a module.

    On teardown this process leaves the cluster and every process of its nodes is stopped.
    """
    with local_cluster(nodes=2, cpus_per_node=1) as address:
        yield address
