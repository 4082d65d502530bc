"""Network levels in the cost model and ``plan`` (DESIGN.md "Network levels").

The SuperPOD presets load with their levels; the cost model prices a data-parallel group by the
levels its stage spans (a stage no larger than a scalable unit stays inside one, rule 4); and on a
SuperPOD whose spine is tapered the plan keeps every DP group inside as few scalable units as the
costs say: inside one when crossing costs more than it saves, across two when the spine is free.
"""
from __future__ import annotations

import dataclasses

import pytest

from partitioner import plan_model
from partitioner.cluster.levels import consecutive_fits
from partitioner.costs.build import build_problem
from partitioner.plan import Plan
from partitioner.presets import load_cluster
from partitioner.problem import Level


def _superpod(oversubscription: float, su_nodes: int = 2):
    """The dgx-superpod-h100 preset with scalable units of ``su_nodes`` nodes (a small cluster still spans
    two) and a spine of the given oversubscription."""
    base = load_cluster("dgx-superpod-h100")
    levels = (Level("su", su_nodes, 50.0), Level("spine", None, 50.0, oversubscription))
    return dataclasses.replace(base, name=f"superpod-su{su_nodes}-x{oversubscription:g}", levels=levels)


def test_superpod_presets_state_their_levels():
    h100 = load_cluster("dgx-superpod-h100")
    assert h100.gpus_per_node == 8 and h100.levels[0].nodes == 32 and h100.levels[-1].nodes is None
    assert h100.summary()["levels"][0] == {"name": "su", "nodes": 32, "GBps": 50.0}
    gb200 = load_cluster("gb200-nvl72-superpod")
    assert gb200.gpus_per_node == 72 and gb200.levels[0].nodes == 8 and 36 in gb200.stage_sizes
    p = build_problem("openvla-7b", "dgx-superpod-h100", nodes=2, global_batch=16, microbatches=1)
    assert p.cluster.levels == h100.levels


def test_a_job_on_part_of_the_gb200_superpod_keeps_its_levels():
    p = build_problem("llava-1.5-7b", "gb200-nvl72-superpod", nodes=2, global_batch=64, microbatches=1, gpus=136)
    assert p.cluster.devices == 136 and p.cluster.levels == load_cluster("gb200-nvl72-superpod").levels
    assert 64 in p.cluster.stage_sizes


def _entry_ms(cluster, key: str) -> float:
    p = build_problem("openvla-7b", cluster, nodes=4, global_batch=256, microbatches=1)
    layer = p.layers[-2]  # a language layer
    entry = next(c for lay, c in layer.costs.items() if lay.key == key)
    return entry.fwd_ms + entry.bwd_ms


def test_the_gradient_sync_is_priced_on_the_levels_the_stage_spans():
    flat, tapered = _superpod(1.0), _superpod(8.0)
    # 16 GPUs = one scalable unit of 2 nodes: the same either way; 32 GPUs cross the spine, 8x tapered
    assert _entry_ms(tapered, "dp16tp1") == pytest.approx(_entry_ms(flat, "dp16tp1"), rel=1e-12)
    assert _entry_ms(tapered, "dp32tp1") > _entry_ms(flat, "dp32tp1") * 1.05


def _units_spanned(plan: Plan, su_gpus: int) -> list[int]:
    return [len({d // su_gpus for d in ids}) for ids in plan.device_ids()]


@pytest.mark.slow
def test_on_a_tapered_superpod_the_plan_keeps_each_dp_group_inside_as_few_units_as_the_costs_say():
    su_gpus = 2 * 8
    crossing = plan_model("openvla-7b", _superpod(1.0), nodes=4, global_batch=256)
    # a free spine: one 32-GPU data-parallel stage across both units is the cheapest plan
    assert _units_spanned(crossing.plan, su_gpus) == [2], crossing.plan
    tapered = _superpod(8.0)
    kept = plan_model("openvla-7b", tapered, nodes=4, global_batch=256)
    assert kept.plan is not None, kept.message
    problem = kept.problem
    # every stage sits in the fewest units its size allows (here one: no DP group crosses the spine) ...
    for ids in kept.plan.device_ids():
        assert consecutive_fits(problem.cluster, ids[0], len(ids))
    assert _units_spanned(kept.plan, su_gpus) == [1] * kept.plan.num_stages
    # ... because crossing costs more than it saves: the fsdp baseline is the free spine's plan (one DP group
    # of 32 GPUs, ZeRO-3) priced on the tapered spine
    fsdp = kept.extra["baselines"]["fsdp"]
    assert _units_spanned(Plan.from_dict(fsdp["plan"]), su_gpus) == [2]
    assert fsdp["value"] > kept.value
