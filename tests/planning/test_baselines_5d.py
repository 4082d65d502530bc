"""The baselines in 5D: Megatron-style (tp, cp, ep, etp) for the whole model, FSDP2 + EP, v1/v2 unchanged.

The hand-built v3 problems: a vision encoder (no ep keys) and a MoE
language model whose routed experts only fit in memory at a given ep
(their weights fall with ep), on one or two nodes of 8 GPUs.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitioner.costs import build_problem
from partitioner.plan import Plan, Stage
from partitioner.plan.cuts import layer_roles, uniform_cuts
from partitioner.planning import BaselineLayout, fsdp_baseline, megatron_baseline, megatron_baselines
from partitioner.planning.assemble import _summary
from partitioner.planning.baselines import StageSums, _megatron_plans, _try, offered_axes, segment_config
from partitioner.planning.records import BaselineRun
from partitioner.planning.schedules.search import with_schedule
from partitioner.problem import Layout, Problem, load_problem
from strategies import examples, small_v3_problems

GIB = 2**30
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _entry(fwd: float, weight: int, act: int = GIB // 4) -> dict:
    return {"fwd_ms": fwd, "bwd_ms": 2 * fwd, "weight_bytes": weight, "act_bytes": act}


def moe_problem(nodes: int = 1, memory: int = 18 * GIB, experts: int = 16 * GIB, stages: int | dict = 1,
                fast_wide_ep: bool = False, zero3: bool = False) -> Problem:
    """Two vision layers (every (dp, tp), no ep keys) and four MoE decoder layers.

    A MoE layer's routed experts weigh ``experts / ep`` on each GPU (etp = 1
    only); its keys are every (dp, tp) with ep in {1, 2, 4, 8} dividing the
    devices; ep adds a little all-to-all time. ``fast_wide_ep`` makes the
    tp = 2, ep = 8 keys (EP x TP = 16 GPUs, over a node) the fastest.
    ``zero3`` adds a ``/zero3`` twin of every key (weights / (dp x cp), and
    the all-gathers' time: 0.5 ms, and 8 ms / ep more for the experts).
    """
    N = nodes * 8
    meshes = [(N // tp, tp) for tp in (1, 2, 4, 8)]
    vision, moe = {}, {}
    for dp, tp in meshes:
        vision[f"dp{dp}tp{tp}"] = _entry(1.0 + 0.1 * tp, GIB // tp)
        for ep in (1, 2, 4, 8):
            if N % ep:
                continue
            key = f"dp{dp}tp{tp}" + (f"ep{ep}" if ep > 1 else "")
            fwd = 4.0 / tp ** 0.5 + 0.05 * ep
            if fast_wide_ep and tp == 2 and ep == 8:
                fwd = 0.5
            moe[key] = _entry(fwd, GIB // tp + experts // ep)
    if zero3:
        for table, gather in ((vision, 0.0), (moe, 8.0)):
            for key, e in list(table.items()):
                lay = Layout.parse(key)
                table[f"{key}/zero3"] = {**e, "fwd_ms": e["fwd_ms"] + 0.5 + gather / lay.ep,
                                         "weight_bytes": e["weight_bytes"] // (lay.dp * lay.cp)}
    layers = [{"name": f"vision.{i}", "module": "vision", "out_bytes": 2**20, "costs": vision} for i in range(2)]
    layers += [{"name": f"llm.{i}", "module": "llm", "out_bytes": 2**20, "costs": moe} for i in range(4)]
    doc = {"version": 3, "name": "moe-test",
           "cluster": {"nodes": nodes, "gpus_per_node": 8, "gpu_memory_bytes": memory,
                       "intra_node_GBps": 300.0, "inter_node_GBps": 50.0},
           "training": {"microbatches": 4, "objective": "iteration"}, "stages": stages, "layers": layers}
    if zero3:
        doc["variants"] = {"zero3": "weights, gradients and optimizer states sharded over dp"}
    return Problem.from_dict(doc)


def _configs(plan: Plan, problem: Problem) -> list[Layout]:
    return [c for s in plan.stages for _, c in s.segment_configs(problem)]


def test_megatron_finds_the_only_fitting_expert_parallelism():
    problem = moe_problem()  # 4 MoE layers x (1/tp + 16/ep) GiB fit in 18 GiB only at ep = 8
    assert (1, 8, 1) in offered_axes(problem) and (1, 4, 1) in offered_axes(problem)
    found = megatron_baseline(problem)
    assert found is not None
    plan, ev = found
    configs = _configs(plan, problem)
    assert [c.ep for c in configs] == [1, 8]  # the vision encoder has no experts: ep = 1 there
    assert all(c.tp == 1 for c in configs)  # ep 8 x tp <= 8 GPUs of a node
    assert BaselineLayout.of(ev) == BaselineLayout(1, 8, 1, 1, 8, 1)
    # nothing with ep < 8 fits: the same search without the ep keys finds nothing
    assert all(_try(problem, p, "iteration") is None for p in _megatron_plans(problem) if max(c.ep for c in _configs(p, problem)) < 8)


def test_megatron_keeps_ep_times_tp_inside_a_node():
    problem = moe_problem(nodes=2, fast_wide_ep=True)
    plans = list(_megatron_plans(problem))
    assert plans and all(c.ep * c.tp <= 8 for p in plans for c in _configs(p, problem))
    plan, ev = megatron_baseline(problem)
    layout = BaselineLayout.of(ev)
    assert layout.ep == 8 and layout.tp == 1 and layout.dp == 16
    # the tp 2 x ep 8 plan (16 GPUs of expert parallelism over two nodes) is valid and faster: only the guide excludes it
    wide = Plan((Stage.from_configs(0, 5, 16, [Layout(8, 2), Layout(8, 2, ep=8)]),))
    faster = _try(problem, wide, "iteration")
    assert faster is not None and faster[1].value < ev.value


def test_megatron_uses_context_parallelism_where_only_it_fits():
    problem = load_problem(EXAMPLES / "v3_long_context_cp2.json")
    plan, ev = megatron_baseline(problem)
    configs = _configs(plan, problem)
    assert configs[-1] == Layout(1, 4, cp=2)  # the language layers' activations fit only with cp = 2
    assert configs[0] == Layout(2, 4)  # the vision encoder has no cp key: its cp ranks are data parallel
    assert BaselineLayout.of(ev).label == "dp 1 x tp 4 x cp 2"
    # without context parallelism nothing fits
    assert all(_try(problem, p, "bottleneck") is None for p in _megatron_plans(problem)
               if all(c.cp == 1 for c in _configs(p, problem)))


def test_fsdp_gets_expert_parallelism():
    problem = moe_problem(zero3=True)  # ZeRO-3 fits at every ep; the experts' all-gathers shrink with ep
    plan, ev = fsdp_baseline(problem)
    configs = _configs(plan, problem)
    assert [c.key for c in configs] == ["dp8tp1/zero3", "dp8tp1ep8/zero3"]  # torchtitan: etp = 1, tp = 1
    assert len(plan.stages) == 1
    # and with cp keys, cp x dp = N: on the long-context example FSDP has no ZeRO-3 key and stays None
    assert fsdp_baseline(load_problem(EXAMPLES / "v3_long_context_cp2.json")) is None


def test_baseline_summary_carries_the_5d_layout():
    problem = moe_problem()
    plan, ev = megatron_baseline(problem)
    doc = _summary("megatron-uniform", BaselineRun(problem, plan, ev, None, ev.iteration_ms)).to_dict()
    assert doc["layout"] == {"pp": 1, "dp": 8, "tp": 1, "cp": 1, "ep": 8, "etp": 1, "label": "dp 8 x tp 1 x ep 8"}
    assert doc["plan"]["stages"][0]["configs"][1]["ep"] == 8


def _todays_megatron(problem: Problem, objective: str, keep: int) -> list:
    """The Megatron-style baseline before 5D: every (P, tp, variant), one (dp, tp) everywhere, evaluated."""
    variants = [""] + [v for v in problem.variants if not v.startswith("zero3")]
    roles, N = layer_roles(problem), problem.num_devices
    v = problem.training.virtual_stages if problem.training.schedule == "interleaved" else 1
    n_dec = sum(r == "decoder" for r in roles) or problem.num_layers
    found = []
    for P in range(problem.stages.min, problem.stages.max + 1):
        d = N // P
        if N % P or d not in problem.cluster.allowed_sizes() or P * v > n_dec or (v > 1 and (P < 2 or problem.microbatches % P)):
            continue
        cuts = uniform_cuts(roles, P * v)
        for tp in (t for t in (1, 2, 4, 8, 16) if t <= min(d, problem.cluster.gpus_per_node) and d % t == 0):
            for var in variants if cuts else ():
                plan = Plan(tuple(Stage(a, b, d, d // tp, tp, tuple(range(c % P * d, (c % P + 1) * d)), variant=var)
                                  for c, (a, b) in enumerate(cuts)))
                ev = _try(problem, plan, objective)
                if ev is not None:
                    found.append((ev[1].value, len(found), *ev))
    found.sort(key=lambda f: f[:2])
    return [(p, e.value) for _, _, p, e in found[:keep]]


def _todays_fsdp(problem: Problem, objective: str):
    found = [f for v in problem.variants if v.startswith("zero3")
             if (f := _try(problem, Plan((Stage(0, problem.num_layers - 1, problem.num_devices, problem.num_devices, 1,
                                                 variant=v),)), objective)) is not None]
    return min(((p, e.value) for p, e in found), key=lambda f: f[1], default=None)


@pytest.mark.parametrize("model, cluster, nodes, batch, m", [
    ("llava-1.5-7b", "dgx-h100", 1, 64, 4),
    ("qwen2-vl-72b", "dgx-h100", 4, 256, 16),
])
def test_v1_v2_presets_give_the_baselines_of_before(model, cluster, nodes, batch, m):
    base = build_problem(model, cluster, nodes=nodes, global_batch=batch, microbatches=m, options={"variants": ["all"]})
    assert offered_axes(base) == [(1, 1, 1)]
    for problem in (base, with_schedule(base, "interleaved", 2)):
        sums = StageSums()
        for objective in ("iteration", "bottleneck"):
            fast = megatron_baselines(problem, objective, keep=3, sums=sums)
            assert fast, (model, problem.training.schedule)
            assert [(p, e.value) for p, e in fast] == _todays_megatron(problem, objective, 3)
            assert all(c == s.layout for p, _ in fast for s in p.stages for c in [s.layout] if s.configs is None)
    fsdp = fsdp_baseline(base, "iteration")
    assert (None if fsdp is None else (fsdp[0], fsdp[1].value)) == _todays_fsdp(base, "iteration")


def _interleaved(problem: Problem) -> Problem:
    doc = problem.to_dict()
    doc["training"].update(schedule="interleaved", virtual_stages=2, microbatches=4)
    doc.pop("stages", None)
    return Problem.from_dict(doc)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problem=small_v3_problems(max_layers=5), interleave=st.booleans())
def test_v3_shortcuts_give_what_evaluating_every_candidate_gives(problem, interleave):
    """The floor and the byte sums (StageSums under each segment's config) skip only what cannot win."""
    if interleave and problem.num_layers >= 4:
        problem = _interleaved(problem)
    gpn = problem.cluster.gpus_per_node
    every = []
    for i, plan in enumerate(_megatron_plans(problem)):
        configs = _configs(plan, problem)
        assert len({c.tp for c in configs}) == 1 and all(c.etp in (1, c.tp) and (c.ep == 1 or c.ep * c.tp <= gpn)
                                                        for c in configs)
        ev = _try(problem, plan, problem.objective)
        if ev is not None:
            every.append((ev[1].value, i, ev[0]))
    every.sort(key=lambda f: f[:2])
    fast = megatron_baselines(problem, keep=2, sums=StageSums())
    assert [(p, e.value) for p, e in fast] == [(p, v) for v, _, p in every[:2]]


def test_schedule_table_shows_a_baselines_expert_parallelism():
    from partitioner.cli.render import _row_cells
    from partitioner.planning.schedules.report import ScheduleCandidate, ScheduleRow

    problem = moe_problem()
    plan, ev = megatron_baseline(problem)
    row = ScheduleRow.of(ScheduleCandidate("baseline", "megatron-uniform", "1f1b", 1, problem, plan, ev=ev,
                                           iteration_ms=ev.iteration_ms))
    assert row.to_dict()["layout"]["ep"] == 8
    assert _row_cells(row, None)[0] == "uniform m 4 P 1 ep 8"
    plain = ScheduleRow.of(ScheduleCandidate("plan", "dp", "1f1b", 1, problem, plan, ev=ev, iteration_ms=ev.iteration_ms))
    assert plain.layout is None and "layout" not in plain.to_dict()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_kept_segment_configs_are_segment_config_s(data):
    # StageSums answers segment_config from prefix counts of the layers without an entry: the same config
    problem = data.draw(small_v3_problems())
    sums = StageSums()
    sums._keep_for(problem)
    configs = {c for layer in problem.layers for c in layer.costs}
    configs |= {Layout(c.dp, c.tp, c.variant, cp=cp, ep=ep, etp=etp) for c in list(configs)
                for cp, ep, etp in offered_axes(problem)}
    n = problem.num_layers
    for config in sorted(configs, key=lambda c: c.key):
        for first in range(n):
            for last in range(first, n):
                assert sums._segment_config(problem, first, last, config) == segment_config(problem, first, last, config)
