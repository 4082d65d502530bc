"""Cross-mesh resharding: the transfer plan, the bytes that cross, its time, the numpy executor."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.cluster.reshard import (
    Sharding,
    execute_backward,
    execute_forward,
    lesson15_volume,
    plan_reshard,
    reshard_time_ms,
)
from partitioner.cluster.topology import default_bandwidth, transfer_ms
from partitioner.problem import Cluster, Topology
from strategies import examples

B, S, D = 8, 16, 128
BF16 = 2


def shards_of(tensor, sharding):
    out = []
    for r in range(sharding.size):
        (b0, b1), (d0, d1) = sharding.block(r, tensor.shape)
        out.append(tensor[b0:b1, :, d0:d1].copy())
    return out


# --------------------------------------------------------------------------- lesson 15


def test_lesson15_colocated_volume():
    plan = plan_reshard((B, S, D), Sharding.on(8, 1), Sharding.on(2, 4), BF16)
    assert plan.total_bytes == B * S * D * BF16
    assert plan.cross_bytes == B * S * D * BF16 * 3 // 4
    # each sample (source rank i holds sample i) keeps exactly one of its four feature slices
    for i in range(8):
        mine = [t for t in plan.transfers if t.src_rank == i]
        assert len(mine) == 4
        assert sum(t.local for t in mine) == 1
        assert {t.features for t in mine} == {(0, 32), (32, 64), (64, 96), (96, 128)}
    # the lesson's uniform all-to-all formula overstates it by 7/6
    formula = lesson15_volume(B, S, D, 8, BF16)
    assert formula == B * S * D * 7 / 8 * BF16
    assert formula / plan.cross_bytes == pytest.approx(7 / 6)


def test_lesson15_layout_contents():
    tensor = np.arange(B * S * D, dtype=np.float32).reshape(B, S, D)
    source, dest = Sharding.on(8, 1), Sharding.on(2, 4)
    out = execute_forward(plan_reshard(tensor.shape, source, dest), shards_of(tensor, source))
    assert len(out) == 8
    for rank, block in enumerate(out):
        g, t = divmod(rank, 4)  # data group g, tensor rank t
        np.testing.assert_array_equal(block, tensor[4 * g : 4 * g + 4, :, 32 * t : 32 * t + 32])


def test_disjoint_meshes_move_everything():
    plan = plan_reshard((B, S, D), Sharding.on(8, 1, 0), Sharding.on(2, 4, 8), BF16)
    assert plan.cross_bytes == B * S * D * BF16
    assert plan.local_bytes == 0


@pytest.mark.parametrize("dp,tp", [(8, 1), (2, 4), (1, 8), (4, 2)])
def test_same_layout_same_devices_moves_nothing(dp, tp):
    plan = plan_reshard((B, S, D), Sharding.on(dp, tp), Sharding.on(dp, tp))
    assert plan.cross_bytes == 0
    assert reshard_time_ms(plan, Cluster(1, 8, 1, 300.0, 25.0)) == 0.0
    shifted = plan_reshard((B, S, D), Sharding.on(dp, tp), Sharding(dp, tp, tuple(reversed(range(8)))))
    assert shifted.cross_bytes == B * S * D * 2  # same layout, every rank moved


def test_forward_then_backward_returns_each_source_shard():
    source, dest = Sharding.on(8, 1), Sharding.on(2, 4)
    v = [np.full((1, S, D), r, dtype=np.float32) for r in range(8)]
    plan = plan_reshard((B, S, D), source, dest, 4)
    back = execute_backward(plan, execute_forward(plan, v))
    assert all(np.array_equal(a, b) for a, b in zip(v, back))


# --------------------------------------------------------------------------- random layouts

DIVISORS = {n: [(dp, n // dp) for dp in range(1, n + 1) if n % dp == 0] for n in (1, 2, 3, 4, 6, 8)}


@st.composite
def layouts(draw, pool=16):
    n = draw(st.sampled_from(sorted(DIVISORS)))
    dp, tp = draw(st.sampled_from(DIVISORS[n]))
    devices = draw(st.permutations(range(pool)))[:n]
    return Sharding(dp, tp, tuple(devices))


@pytest.mark.slow
@settings(max_examples=examples(120), deadline=None)
@given(
    source=layouts(),
    dest=layouts(),
    shape=st.tuples(st.integers(1, 12), st.integers(1, 3), st.integers(1, 20)),
    seed=st.integers(0, 2**16),
)
def test_random_layouts_round_trip(source, dest, shape, seed):
    tensor = np.random.default_rng(seed).standard_normal(shape)
    plan = plan_reshard(shape, source, dest, 8)
    out = execute_forward(plan, shards_of(tensor, source))
    for block, want in zip(out, shards_of(tensor, dest)):
        np.testing.assert_array_equal(block, want)
    back = execute_backward(plan, out)
    for block, want in zip(back, shards_of(tensor, source)):
        np.testing.assert_array_equal(block, want)
    # the blocks cover the tensor once; crossing bytes are the ones between distinct devices
    assert plan.total_bytes == tensor.size * 8
    assert plan.cross_bytes == sum(t.nbytes for t in plan.transfers if t.src != t.dst)
    assert plan.transpose().cross_bytes == plan.cross_bytes


def test_executor_checks_shapes():
    plan = plan_reshard((B, S, D), Sharding.on(8, 1), Sharding.on(2, 4))
    with pytest.raises(ValueError, match="expected 8 shards"):
        execute_forward(plan, [np.zeros((1, S, D))] * 7)
    with pytest.raises(ValueError, match="shard 3 has shape"):
        execute_forward(plan, [np.zeros((1, S, D))] * 3 + [np.zeros((2, S, D))] + [np.zeros((1, S, D))] * 4)


@pytest.mark.parametrize(
    "make,match",
    [
        (lambda: Sharding(2, 2, (0, 1, 2)), "needs 4 devices"),
        (lambda: Sharding(2, 1, (0, 0)), "distinct"),
        (lambda: Sharding(0, 1, ()), ">= 1"),
        (lambda: plan_reshard((0, 1, 1), Sharding.on(1, 1), Sharding.on(1, 1)), ">= 1"),
    ],
)
def test_bad_layouts(make, match):
    with pytest.raises(ValueError, match=match):
        make()


# --------------------------------------------------------------------------- time


def test_lesson15_time_is_the_busiest_nvlink_port():
    cluster = Cluster(1, 8, 80 * 2**30, 300.0, 25.0)
    plan = plan_reshard((B, S, D), Sharding.on(8, 1), Sharding.on(2, 4), BF16)
    # every GPU sends three slices of its sample and receives three samples' slices
    per_gpu = 3 * S * (D // 4) * BF16
    assert reshard_time_ms(plan, cluster) == pytest.approx(transfer_ms(per_gpu, 300.0))


def test_nic_and_nvlink_ports_are_separate():
    cluster = Cluster(2, 4, 1, 300.0, 25.0)
    # device 0 sends half its rows to device 1 (same node) and half to device 4 (other node)
    plan = plan_reshard((2, 1, 1000), Sharding(1, 1, (0,)), Sharding(2, 1, (1, 4)), 1)
    assert reshard_time_ms(plan, cluster) == pytest.approx(max(transfer_ms(1000, 300.0), transfer_ms(1000, 25.0)))


@pytest.mark.parametrize("a,b", [(1, 1), (1, 4), (4, 2), (2, 4), (4, 4)])
@pytest.mark.parametrize("same_node", [True, False])
def test_pure_dp_hand_off_matches_the_stage_transfer_formula(a, b, same_node):
    """A dp a -> dp b hand-off between disjoint stages costs out_bytes / (min(a, b) bw), as plan.evaluate says."""
    cluster = Cluster(2, 8, 1, 300.0, 25.0)
    assert a + b <= 8  # both stages fit on node 0 when same_node
    src = Sharding.on(a, 1, 0)
    dst = Sharding.on(b, 1, a if same_node else 8)
    nbytes = 8 * 3 * 64 * 2
    plan = plan_reshard((8, 3, 64), src, dst, 2)
    want = transfer_ms(nbytes, default_bandwidth(cluster, a, b, same_node))
    assert reshard_time_ms(plan, cluster) == pytest.approx(want)


def test_user_topology_cut_bound():
    # a one-node star equal to the default graph: the cut bound equals the port time
    star = Topology(tuple((g, "switch", 300.0) for g in range(8)))
    user = Cluster(1, 8, 1, 300.0, 25.0, star)
    default = Cluster(1, 8, 1, 300.0, 25.0)
    plan = plan_reshard((B, S, D), Sharding.on(8, 1), Sharding.on(2, 4), BF16)
    assert reshard_time_ms(plan, user) == pytest.approx(reshard_time_ms(plan, default))
    # a slow link on the way to GPU 1 is seen
    slow = Topology(tuple((g, "switch", 30.0 if g == 1 else 300.0) for g in range(8)))
    assert reshard_time_ms(plan, Cluster(1, 8, 1, 300.0, 25.0, slow)) == pytest.approx(
        transfer_ms(3 * S * (D // 4) * BF16, 30.0)
    )


def test_time_rejects_devices_off_the_cluster():
    plan = plan_reshard((B, S, D), Sharding.on(8, 1, 0), Sharding.on(8, 1, 8))
    with pytest.raises(ValueError, match="not on this cluster"):
        reshard_time_ms(plan, Cluster(1, 8, 1, 300.0, 25.0))
