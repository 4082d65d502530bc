"""The v2 stage tables and their reshard times against from-the-definition computations.

``reshard._port_elements`` (closed form) is compared with the busiest ports of
:func:`partitioner.reshard.plan_reshard`'s explicit transfer list, and
``StageCosts.matrix`` / ``configs`` with an enumeration of every config tuple
(one config per segment) of every stage on random small v2 problems.
"""
from __future__ import annotations

import itertools
import math
from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.reshard import Sharding, _port_elements, plan_reshard


def _divisor_pairs(n: int) -> list[tuple[int, int]]:
    return [(dp, n // dp) for dp in range(1, n + 1) if n % dp == 0]


def _port_elements_by_plan(source, dest, pattern):
    """Busiest NVLink / NIC port and total from the explicit plan (the definition)."""
    B = math.lcm(source[0], dest[0])
    D = math.lcm(source[1], dest[1])
    devices = tuple(range(len(pattern)))
    plan = plan_reshard((B, 1, D), Sharding(*source, devices), Sharding(*dest, devices), dtype_bytes=1)
    load: dict = defaultdict(int)
    for (src, dst), count in plan.traffic().items():
        link = "nvlink" if pattern[src] == pattern[dst] else "nic"
        load[(src, link + "-out")] += count
        load[(dst, link + "-in")] += count
    nvlink = max((c for (_, port), c in load.items() if port.startswith("nvlink")), default=0)
    nic = max((c for (_, port), c in load.items() if port.startswith("nic")), default=0)
    return nvlink, nic, B * D


@st.composite
def _reshard_case(draw):
    n = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16, 24, 32]))
    source = draw(st.sampled_from(_divisor_pairs(n)))
    dest = draw(st.sampled_from(_divisor_pairs(n)))
    per_node = draw(st.sampled_from([1, 2, 4, 8]))
    canonical = draw(st.booleans())
    if canonical:
        pattern = tuple(r // per_node for r in range(n))
    else:
        nodes = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
        seen: dict = {}
        pattern = tuple(seen.setdefault(x, len(seen)) for x in nodes)
    return source, dest, pattern


@settings(deadline=None, max_examples=150)
@given(_reshard_case())
def test_port_elements_closed_form_matches_the_plan(case):
    source, dest, pattern = case
    assert _port_elements(source, dest, pattern) == _port_elements_by_plan(source, dest, pattern)


def test_port_elements_on_every_mesh_pair_of_two_nodes():
    for n in (8, 16):
        pattern = tuple(r // 8 for r in range(n))
        for source in _divisor_pairs(n):
            for dest in _divisor_pairs(n):
                assert _port_elements(source, dest, pattern) == _port_elements_by_plan(source, dest, pattern)


def test_port_elements_rejects_a_layout_of_the_wrong_size():
    with pytest.raises(ValueError):
        _port_elements((2, 2), (4, 2), tuple(range(8)))
