"""The seed lessons' classes: their check scripts, run unchanged, and the facades' answers."""
from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ROOT
from partitioner import load_problem
from partitioner.compat import AsymmetricPipelineScheduler, CrossMeshTensorResharder, layer_partition_problem
from strategies import examples

CHECKS = ROOT / "tests" / "seed_checks"
# sha256 of ../shared/seeds/checks/*.py: the copies must stay byte-for-byte unchanged
SEED_CHECKS = {
    "lesson15_check.py": "e127cca882bb47f70fb7c8ba82975f636792a2b084c4ee2494dc56fe0d92d1c5",
    "lesson16_check.py": "86461d364c300ba02e90e0817e2fb8adfe8aee0bce5ec4f477d3c9fefc7c5acf",
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SEED_CHECKS))
def test_seed_check_script_passes_unchanged(name):
    path = CHECKS / name
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SEED_CHECKS[name], f"{path} was edited"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "100% 通过" in r.stdout


# --------------------------------------------------------------------------- lesson 16


def test_flow_shop_answer():
    total, bubble = AsymmetricPipelineScheduler().simulate_1f1b_execution([30.0, 10.0, 10.0, 20.0], 8)
    assert total == 280.0
    assert bubble == pytest.approx(0.5)


def test_exact_rebalancing_of_the_lesson():
    layers = AsymmetricPipelineScheduler().solve_optimal_layer_partition(32, 2.0, 16.0, 8.0, 4)
    assert layers == [3, 11, 11, 7]  # stage times 22 ms each, the unique optimum


def test_rebalancing_problem_is_the_example(examples):
    built = layer_partition_problem(32, 2.0, 16.0, 8.0, 4)
    example = load_problem(examples / "rebalance_4gpu.json")
    assert built.layers == example.layers
    assert built.stages == example.stages
    assert built.training == example.training
    assert built.cluster == example.cluster


def test_exact_solve_may_leave_an_end_stage_without_llm_layers():
    # the lesson's greedy forces one LLM layer onto stage 0 (102 ms); the optimum keeps it at 100 ms
    layers = AsymmetricPipelineScheduler().solve_optimal_layer_partition(8, 2.0, 100.0, 0.0, 3)
    assert layers[0] == 0 and sum(layers) == 8


def bottleneck(layers, cost, head, tail):
    times = [n * cost for n in layers]
    times[0] += head
    times[-1] += tail
    return max(times)


@settings(max_examples=examples(25), deadline=None)
@given(
    total=st.integers(1, 9),
    stages=st.integers(1, 4),
    cost=st.sampled_from([0.5, 1.0, 2.0, 3.0]),
    head=st.integers(0, 20),
    tail=st.integers(0, 20),
)
def test_rebalancing_is_optimal(total, stages, cost, head, tail):
    stages = min(stages, total + 2)
    # every way to give the LLM layers to the stages; middle stages need one layer (a stage is never empty)
    best = min(
        bottleneck(split, cost, head, tail)
        for split in itertools.product(range(total + 1), repeat=stages)
        if sum(split) == total and all(n >= 1 for n in split[1:-1])
    )
    got = AsymmetricPipelineScheduler().solve_optimal_layer_partition(total, cost, float(head), float(tail), stages)
    assert sum(got) == total and len(got) == stages
    assert bottleneck(got, cost, head, tail) == pytest.approx(best)


def test_rebalancing_rejects_too_many_stages():
    with pytest.raises(ValueError, match="rebalancing problem"):
        AsymmetricPipelineScheduler().solve_optimal_layer_partition(1, 2.0, 1.0, 1.0, 4)


# --------------------------------------------------------------------------- lesson 15


def test_resharder_volume_and_disjoint_meshes():
    colocated = CrossMeshTensorResharder()
    assert colocated.plan(8, 16, 128).cross_bytes == 8 * 16 * 128 * 2 * 3 // 4
    disjoint = CrossMeshTensorResharder(vision_devices=range(8), language_devices=range(8, 16))
    assert disjoint.plan(8, 16, 128).cross_bytes == 8 * 16 * 128 * 2


def test_resharder_with_a_tensor_parallel_vision_mesh():
    r = CrossMeshTensorResharder(num_gpus=8, dp_v=4, tp_v=2, dp_l=2, tp_l=4)
    full = np.arange(8 * 3 * 16, dtype=np.float64).reshape(8, 3, 16)
    v = [full[2 * (k // 2) : 2 * (k // 2) + 2, :, 8 * (k % 2) : 8 * (k % 2) + 8] for k in range(8)]
    out = r.forward_reshard(v)
    for rank, block in enumerate(out):
        g, t = divmod(rank, 4)
        np.testing.assert_array_equal(block, full[4 * g : 4 * g + 4, :, 4 * t : 4 * t + 4])
    back = r.backward_reshard(out)
    assert all(np.array_equal(a, b) for a, b in zip(v, back))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(num_gpus=8, dp_v=4, tp_v=1), "vision mesh"),
        (dict(num_gpus=8, dp_l=2, tp_l=2), "language mesh"),
    ],
)
def test_resharder_rejects_meshes_of_the_wrong_size(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CrossMeshTensorResharder(**kwargs)


def test_resharder_rejects_wrong_inputs():
    r = CrossMeshTensorResharder()
    with pytest.raises(ValueError, match="one per vision rank"):
        r.forward_reshard([np.zeros((1, 4, 8))] * 7)
    with pytest.raises(ValueError, match="one per language rank"):
        r.backward_reshard([np.zeros((4, 8))] * 8)


def test_resharder_is_the_lesson15_v2_stage_and_its_reshard():
    """The colocated meshes are one v2 stage (vision dp8tp1, language dp2tp4); r is the busiest port."""
    from partitioner import evaluate, solve
    from partitioner.cluster.reshard import reshard_time_ms
    from partitioner.plan import Plan
    from partitioner.problem import Layout

    problem = load_problem(ROOT / "examples" / "colocated_1node.json")
    r = CrossMeshTensorResharder()
    stage = r.stage(0, problem.num_layers - 1)
    assert stage.configs == (Layout(8, 1), Layout(2, 4)) and stage.device_ids == tuple(range(8))
    ev = evaluate(problem, Plan((stage,)))
    # the exact optimum of the example (brute, tests/solvers/test_brute_segments.py) is this stage
    assert ev.value == pytest.approx(solve(problem, "brute").value, rel=1e-12)
    # r from the class equals the stage's reshard and the explicit transfer plan's busiest port
    B, S, D = 16, 256, 12288  # 16 x 256 x 12288 x 2 B = the example's vision out_bytes
    assert B * S * D * 2 == problem.layers[2].out_bytes
    expect = reshard_time_ms(r.plan(B, S, D), problem.cluster)
    assert r.reshard_ms(B, S, D, problem.cluster) == pytest.approx(expect, rel=1e-12)
    assert ev.stages[0].reshard_ms == pytest.approx(expect, rel=1e-12)
    assert r.stage(0, 6, ("zero3", "")).configs == (Layout(8, 1, "zero3"), Layout(2, 4))


def test_resharder_stage_needs_colocated_meshes():
    r = CrossMeshTensorResharder(vision_devices=range(8), language_devices=range(8, 16))
    with pytest.raises(ValueError, match="not colocated"):
        r.stage(0, 6)
