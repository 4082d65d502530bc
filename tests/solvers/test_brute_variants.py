"""Memory-knob variants against the brute-force oracle on small cost-model problems (format v2)."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.costs import build_problem
from partitioner.plan import evaluate
from partitioner.planning import refine_knobs, uniform_projection, variant_at
from partitioner.presets import ClusterSpec, ModelSpec, ModuleSpec
from partitioner.solvers import solve
from strategies import examples


def tiny_model(vit_layers: int, llm_layers: int, width: int) -> ModelSpec:
    return ModelSpec("tiny", (
        ModuleSpec("vision", "vit", layers=vit_layers, hidden=256, heads=4, ffn=1024, bias=True, patch=14, image_size=112,
                   images=2),
        ModuleSpec("projector", "projector", in_dim=256, dims=(width,), tokens=128),
        ModuleSpec("llm", "llm", layers=llm_layers, hidden=width, heads=8, ffn=3 * width, gated=True, norm="rmsnorm",
                   vocab=1000, text_tokens=128),
    ))


def tiny_problem(vit_layers: int, llm_layers: int, width: int, memory_mib: int, variants: str = "all"):
    cluster = ClusterSpec("mini", gpus_per_node=2, gpu_memory_bytes=memory_mib * 2**20, peak_tflops=100,
                          intra_node_GBps=100, inter_node_GBps=10, hbm_GBps=1000)
    return build_problem(tiny_model(vit_layers, llm_layers, width), cluster, nodes=2, global_batch=16, microbatches=4,
                         options={"variants": variants, "memory_reserve_bytes": 0, "allocator_fragmentation": 0.0}, max_stages=3)


@pytest.mark.slow
@settings(max_examples=examples(8), deadline=None)
@given(vit=st.integers(1, 2), llm=st.integers(2, 3), width=st.sampled_from([512, 1024]), memory=st.integers(150, 600))
def test_variants_only_add_options_and_refinement_is_exact(vit, llm, width, memory):
    v2 = tiny_problem(vit, llm, width, memory)
    v1 = tiny_problem(vit, llm, width, memory, variants="none")
    best2 = solve(v2, "brute")
    best1 = solve(v1, "brute")
    assert best2.status in ("optimal", "infeasible") and best1.status in ("optimal", "infeasible")
    if best1.plan is not None:  # every v1 plan is a v2 plan with the same value: the plain entries are the v1 ones
        assert best2.plan is not None and best2.value <= best1.value * (1 + 1e-9)
        assert evaluate(v2, best1.plan).value == pytest.approx(best1.value)
    if best2.plan is None:
        return
    assert evaluate(v2, best2.plan).value == pytest.approx(best2.value)
    # for the optimum's cuts and meshes, choosing each segment's knobs alone finds the optimum again
    refined = refine_knobs(v2, best2.plan)
    assert refined is not None and refined[1].value == pytest.approx(best2.value)
    # a plan of a uniform projection, with its variant on every stage, is a plan of v2 with the same value
    for variant in ["", *v2.variants]:
        proj = uniform_projection(v2, variant)
        found = solve(proj, "brute") if proj is not None else None
        if found is not None and found.plan is not None:
            lifted = type(found.plan)(tuple(
                s.__class__(s.first_layer, s.last_layer, s.devices, s.dp, s.tp, s.device_ids, variant_at(v2, s.dp, variant))
                for s in found.plan.stages))
            assert evaluate(v2, lifted).value == pytest.approx(found.value)
            assert found.value >= best2.value * (1 - 1e-9)


def test_recompute_or_zero3_makes_a_tight_model_fit():
    tight = 200  # MiB: no plan fits without memory knobs (260 does)
    assert solve(tiny_problem(2, 3, 1024, tight, variants="none"), "brute").plan is None
    best = solve(tiny_problem(2, 3, 1024, tight), "brute")
    assert best.plan is not None
    used = {c.variant for s in evaluate(tiny_problem(2, 3, 1024, tight), best.plan).stages for c in s.configs}
    assert used - {""}  # some stage needed a memory knob
