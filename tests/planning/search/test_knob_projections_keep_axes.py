"""The uniform knob projections of a format-v3 problem keep the cp/ep/etp axes and the ties."""
from __future__ import annotations

from partitioner.plan import Plan, Stage, evaluate
from partitioner.planning.search.knobs import refine_knobs, uniform_projection, variant_at
from partitioner.problem import Layout, Problem


def _entry(ms: float, weight: int, act: int = 0, tied: int = 0) -> dict:
    out = {"fwd_ms": ms, "bwd_ms": 2 * ms, "weight_bytes": weight, "act_bytes": act}
    if tied:
        out["tied_weight_bytes"] = tied
    return out


def _problem() -> Problem:
    """Two layers on 4 GPUs: an embedding and a tied head, each with a cp2 and an ep2 key and ZeRO-1 twins."""
    def costs(ms: float, tied: int = 0) -> dict:
        return {
            "dp4tp1": _entry(ms, 100, 10, tied), "dp4tp1/zero1": _entry(ms, 60, 10, tied),
            "dp2tp1cp2": _entry(ms / 2, 100, 5, tied), "dp2tp1cp2/zero1": _entry(ms / 2, 70, 5, tied),
            "dp4tp1ep2": _entry(ms * 0.9, 50, 10, tied), "dp4tp1ep2/zero1": _entry(ms * 0.9, 30, 10, tied),
        }
    return Problem.from_dict({
        "version": 3,
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu_memory_bytes": 10**6, "intra_node_GBps": 100.0,
                    "inter_node_GBps": 10.0},
        "training": {"microbatches": 2, "objective": "bottleneck"},
        "variants": {"zero1": "ZeRO-1: optimizer states sharded over the replicas"},
        "layers": [
            {"name": "embed", "module": "llm", "out_bytes": 0, "costs": costs(1.0)},
            {"name": "head", "module": "llm", "out_bytes": 0, "costs": costs(2.0, tied=20), "tied_to": 0},
        ],
    })


def test_projection_keeps_the_axes_and_the_ties():
    problem = _problem()
    proj = uniform_projection(problem, "zero1")
    assert proj is not None and proj.version == 3 and not proj.variants
    keys = {c.key for c in proj.layers[1].costs}
    assert keys == {"dp4tp1", "dp2tp1cp2", "dp4tp1ep2"}
    assert proj.layers[1].tied_to == 0
    # each plain key holds its zero1 twin's entry, the axes kept
    assert proj.layers[1].costs[Layout(2, 1, cp=2)].weight_bytes == 70
    assert proj.layers[1].costs[Layout(4, 1, ep=2)].weight_bytes == 30
    assert proj.layers[1].costs[Layout(4, 1, ep=2)].tied_weight_bytes == 20


def test_zero_needs_more_than_one_replica_over_dp_and_cp():
    problem = _problem()
    assert variant_at(problem, 1, "zero1") == ""
    assert variant_at(problem, 1 * 2, "zero1") == "zero1"  # dp 1 x cp 2: the distributed optimizer shards over both


def test_refined_knobs_keep_a_stage_on_its_cp_and_ep_config():
    problem = _problem()
    for layout in (Layout(2, 1, cp=2), Layout(4, 1, ep=2)):
        plan = Plan((Stage.from_configs(0, 1, 4, [layout]),))
        refined = refine_knobs(problem, plan)
        assert refined is not None
        stage = refined[0].stages[0]
        assert (stage.cp, stage.ep) == (layout.cp, layout.ep) and stage.variant == "zero1"
        assert refined[1].value == evaluate(problem, refined[0]).value
