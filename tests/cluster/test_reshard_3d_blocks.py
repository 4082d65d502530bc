"""Reshard v3: 3D blocks (batch over dp, sequence over cp, features over tp) between two segments.

DESIGN.md, "Problem format v3": rank r = (i_dp * C + i_cp) * T + i_tp holds
batch rows [i_dp/D, (i_dp+1)/D), positions [i_cp/C, (i_cp+1)/C) and
feature columns [i_tp/T, (i_tp+1)/T); the bytes a destination rank needs
and its own device does not hold cross, timed by the busiest port. With
C = 1 on both sides this is v2's formula; ep/etp never move the activation.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.cluster.reshard import (
    Sharding,
    execute_backward,
    execute_forward,
    plan_reshard,
    reshard_time_ms,
    segment_reshard_ms,
    stage_reshard_ms,
)
from partitioner.problem import Cluster, Layout

NODE = Cluster(1, 8, 10**12, 100.0, 25.0)
TWO = Cluster(2, 4, 10**12, 100.0, 25.0)


def ms(nbytes: float, gbps: float) -> float:
    return nbytes / (gbps * 1e6)


def test_the_rank_order_is_tp_then_cp_then_dp():
    s = Sharding(2, 2, tuple(range(8)), cp=2)
    assert [s.coords(r) for r in range(8)] == [(d, c, t) for d in range(2) for c in range(2) for t in range(2)]
    # rank 5 = (1 * 2 + 0) * 2 + 1: second half of the batch, first half of the sequence, second feature half
    assert s.block3(5, (4, 8, 6)) == ((2, 4), (0, 4), (3, 6))


@pytest.mark.parametrize(
    "source, dest, share",
    [
        # vision dp 2 x cp 4 -> language dp 2 x tp 4 on one node: each GPU keeps 1/32 of the tensor and receives
        # 1/8 - 1/32 = 3/32 (its half batch, a quarter of the features), sending as much (the v3 example's reshard)
        ("dp2tp1cp4", "dp2tp4", 3 / 32),
        # sequence split -> feature split over all 8: keep 1/64, receive 1/8 - 1/64 = 7/64
        ("dp1tp1cp8", "dp1tp8", 7 / 64),
        # v2 lesson 15, C = 1 on both sides: dp 8 -> dp 2 x tp 4 moves 3/32 through each port
        ("dp8tp1", "dp2tp4", 3 / 32),
        # batch eighths -> batch quarters x sequence halves: GPU 0 needs eighths 0-1 of sequence half 0 (1/8),
        # holds eighth 0 of it and receives eighth 1 of it (1/16); it sends as much
        ("dp8tp1", "dp4tp1cp2", 1 / 16),
        # sequence quarters -> sequence halves x feature halves (dp 2 both): GPU 0 holds (batch half 0, quarter
        # 0, all features), needs (half 0, quarters 0-1, feature half 0): it receives quarter 1's feature half
        # 0 from GPU 1 (1/2 x 1/4 x 1/2 = 1/16) and sends its feature half 1 to GPU 1 (1/16)
        ("dp2tp1cp4", "dp2tp2cp2", 1 / 16),
    ],
)
def test_closed_forms_on_one_node(source, dest, share):
    b = 2**30
    got = stage_reshard_ms(b, Layout.parse(source), Layout.parse(dest), 8, NODE)
    assert got == pytest.approx(ms(b * share, NODE.intra_node_GBps), rel=1e-12)
    # the same as the explicit transfer plan on a tensor every block divides
    plan = plan_reshard((8, 8, 8), _sharding(source), _sharding(dest), dtype_bytes=1)
    per_element = b / 512
    assert reshard_time_ms(plan, NODE) == pytest.approx(got / per_element * 1.0, rel=1e-12)


def _sharding(key: str, devices=None) -> Sharding:
    lay = Layout.parse(key)
    return Sharding(lay.dp, lay.tp, tuple(devices or range(lay.devices)), cp=lay.cp)


def test_c1_on_both_sides_is_v2s_formula():
    """Every (dp, tp) pair of 8 GPUs: the v3 code with cp = 1 gives the v2 closed form, an outer product over
    (batch, features) alone, computed here by hand."""
    meshes = [(d, 8 // d) for d in (1, 2, 4, 8)]
    for (ds, ts), (dd, td) in itertools.product(meshes, meshes):
        if (ds, ts) == (dd, td):
            continue
        B, D = math.lcm(ds, dd), math.lcm(ts, td)
        worst = 0
        for r in range(8):
            i, t = divmod(r, ts)
            held = {(b, f) for b in range(i * B // ds, (i + 1) * B // ds) for f in range(t * D // ts, (t + 1) * D // ts)}
            i2, t2 = divmod(r, td)
            need = {(b, f) for b in range(i2 * B // dd, (i2 + 1) * B // dd) for f in range(t2 * D // td, (t2 + 1) * D // td)}
            worst = max(worst, len(need - held), len(held - need))
        expected = ms(2**20 * worst / (B * D), NODE.intra_node_GBps)
        v3 = segment_reshard_ms(2**20, Layout(ds, ts, "", 1), Layout(dd, td, "", 1), range(8), NODE)
        assert v3 == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("source, dest", [("dp2tp2ep4", "dp2tp2"), ("dp2tp2cp2ep8", "dp2tp2cp2ep2etp2"), ("dp4tp2/zero3", "dp4tp2ep8")])
def test_ep_etp_and_variants_never_move_the_activation(source, dest):
    devices = Layout.parse(source).devices
    assert stage_reshard_ms(2**30, Layout.parse(source), Layout.parse(dest), devices, NODE) == 0.0
    assert segment_reshard_ms(2**30, Layout.parse(source), Layout.parse(dest), range(devices), NODE) == 0.0


def _meshes(n: int) -> list[tuple[int, int, int]]:
    return [(n // (t * c), t, c) for t in (1, 2, 4, 8) for c in (1, 2, 4, 8) if n % (t * c) == 0]


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([4, 8]), st.data())
def test_the_closed_form_is_the_transfer_plan(n, data):
    """Port loads of the closed form equal those of the explicit block plan, across two nodes too."""
    (ds, ts, cs), (dd, td, cd) = data.draw(st.sampled_from(_meshes(n))), data.draw(st.sampled_from(_meshes(n)))
    cluster = data.draw(st.sampled_from([NODE, TWO])) if n == 8 else NODE
    ids = tuple(data.draw(st.permutations(range(n))))
    B, S, D = math.lcm(ds, dd), math.lcm(cs, cd), math.lcm(ts, td)
    plan = plan_reshard((B, S, D), Sharding(ds, ts, ids, cs), Sharding(dd, td, ids, cd), dtype_bytes=1)
    got = segment_reshard_ms(B * S * D, Layout(ds, ts, "", cs), Layout(dd, td, "", cd), ids, cluster)
    assert got == pytest.approx(reshard_time_ms(plan, cluster), rel=1e-12, abs=0.0)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_meshes(8)), st.sampled_from(_meshes(8)), st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9)))
def test_forward_moves_every_element_to_its_3d_block_and_backward_returns_it(source, dest, shape):
    tensor = np.arange(np.prod(shape)).reshape(shape)
    src = Sharding(source[0], source[1], tuple(range(8)), source[2])
    dst = Sharding(dest[0], dest[1], tuple(range(7, -1, -1)), dest[2])

    def blocks(sharding):
        out = []
        for r in range(sharding.size):
            (b0, b1), (s0, s1), (d0, d1) = sharding.block3(r, shape)
            out.append(tensor[b0:b1, s0:s1, d0:d1])
        return out

    plan = plan_reshard(shape, src, dst, dtype_bytes=2)
    assert plan.total_bytes == 2 * tensor.size
    moved = execute_forward(plan, blocks(src))
    for got, want in zip(moved, blocks(dst)):
        np.testing.assert_array_equal(got, want)
    back = execute_backward(plan, moved)
    for got, want in zip(back, blocks(src)):
        np.testing.assert_array_equal(got, want)
