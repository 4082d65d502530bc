"""Format v2 in the replay and the pictures: stage times with reshards, segments drawn as sub-bars."""
from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from partitioner import evaluate, load_problem, simulate, solve
from partitioner.plan import Plan, Stage
from partitioner.problem import Layout
from partitioner.simulate.breakdown import backward_order, stage_parts
from partitioner.simulate.viz import gantt, save_gantt
from strategies import examples, small_v2_problems

ROOT = Path(__file__).resolve().parents[2]
LESSON15 = ROOT / "examples" / "colocated_1node.json"


def _lesson15():
    p = load_problem(LESSON15)
    plan = Plan((Stage.from_configs(0, 6, 8, [Layout(8, 1), Layout(2, 4)]),)).with_device_ids()
    return p, plan


def test_replay_uses_stage_times_with_reshards():
    p, plan = _lesson15()
    ev = evaluate(p, plan)
    sim = simulate(p, plan)
    st = ev.stages[0]
    assert sim.fwd_ms == (st.fwd_ms,) and sim.bwd_ms == (st.bwd_ms,)
    assert st.fwd_ms == pytest.approx(st.compute_fwd_ms + 0.03145728, rel=1e-12)
    # one stage: the microbatches run back to back, m (F + B)
    assert sim.makespan_ms == pytest.approx(p.microbatches * 16.36371456, rel=1e-12)
    assert sim.stage_labels == ("stage 0: layers 0-6, 8 GPU: vision dp8tp1, llm dp2tp4",)


def test_parts_add_up_to_the_stage_times_in_run_order():
    p, plan = _lesson15()
    ev = evaluate(p, plan)
    parts, = stage_parts(p, ev)
    assert [x.kind for x in parts] == ["segment", "reshard", "segment", "send"]
    assert [x.label for x in parts] == ["vision dp8tp1", "reshard dp8tp1 -> dp2tp4", "llm dp2tp4", "send"]
    assert sum(x.fwd_ms for x in parts) == pytest.approx(ev.stages[0].fwd_ms, rel=1e-12)
    assert sum(x.bwd_ms for x in parts) == pytest.approx(ev.stages[0].bwd_ms, rel=1e-12)
    assert [x.label for x in backward_order(parts)] == ["llm dp2tp4", "reshard dp8tp1 -> dp2tp4", "vision dp8tp1", "send"]


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problem=small_v2_problems())
def test_parts_match_evaluate_on_random_v2_plans(problem):
    result = solve(problem, "brute")
    if result.status != "optimal":
        return
    ev = result.evaluation
    for s, parts in zip(ev.stages, stage_parts(problem, ev)):
        assert sum(x.fwd_ms for x in parts) == pytest.approx(s.fwd_ms, rel=1e-9, abs=1e-12)
        assert sum(x.bwd_ms for x in parts) == pytest.approx(s.bwd_ms, rel=1e-9, abs=1e-12)
        assert sum(1 for x in parts if x.kind == "segment") == len(s.segments)
    sim = simulate(problem, result.plan)
    assert sim.fwd_ms == tuple(s.fwd_ms for s in ev.stages)


def test_v1_labels_and_parts_are_one_segment(examples):
    p = load_problem(examples / "vla_toy_2x4.json")
    r = solve(p, "brute")
    sim = simulate(p, r.plan)
    s0 = r.evaluation.stages[0]
    assert sim.stage_labels[0].endswith(f"{s0.devices} GPU dp{s0.layout.dp}tp{s0.layout.tp}")
    assert all([x.kind for x in parts] == ["segment", "send"] for parts in sim.stage_parts)


@pytest.mark.slow
def test_gantt_splits_a_stage_into_segments_and_hatched_reshards():
    p, _ = _lesson15()
    # slow NVLink and two stages so that the reshard is wide and a plain stage sits beside a split one
    doc = p.to_dict()
    doc["cluster"].update(nodes=2, intra_node_GBps=3.0)
    doc["stages"] = {"min": 1, "max": 2}
    doc["training"]["microbatches"] = 4
    from partitioner.problem import Problem

    p2 = Problem.from_dict(doc)
    plan = Plan((Stage.from_configs(0, 4, 8, [Layout(8, 1), Layout(2, 4)]), Stage(5, 6, 8, 2, 4))).with_device_ids()
    sim = simulate(p2, plan)
    ax = gantt(sim).axes[0]
    ops0 = [op for op in sim.timeline if op.stage == 0]
    # grey bands + one box per op + per op of stage 0: two segment sub-bars and one reshard
    assert len(ax.patches) == sim.num_stages + len(sim.timeline) + 3 * len(ops0)
    hatched = [b for b in ax.patches if b.get_hatch()]
    assert len(hatched) == len(ops0)
    r = evaluate(p2, plan).stages[0].reshard_ms
    for bar, op in zip(hatched, ops0):
        assert bar.get_width() == pytest.approx(r * op.duration / (sim.fwd_ms[0] if op.kind == "F" else sim.bwd_ms[0]))
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "reshard" in legend and legend.index("reshard") < legend.index("idle")
    # every microbatch number is drawn, on the longest segment (not on the hatched reshard)
    assert sorted(t.get_text() for t in ax.texts) == sorted(str(op.microbatch) for op in sim.timeline)
    for t in ax.texts:
        x, y = t.get_position()
        assert not any(b.get_x() <= x <= b.get_x() + b.get_width() and abs(b.get_y() + b.get_height() / 2 - y) < 1e-9
                       for b in hatched)


def test_lesson15_gantt_png(tmp_path):
    p, plan = _lesson15()
    path = save_gantt(simulate(p, plan), tmp_path / "l15.png", "lesson 15")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chrome_trace_nests_segments_and_reshards_in_split_ops():
    import json

    from partitioner.simulate.viz import chrome_trace

    p, plan = _lesson15()
    sim = simulate(p, plan)
    doc = json.loads(json.dumps(chrome_trace(sim)))
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] in ("forward", "backward")]
    nested = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] in ("segment", "reshard")]
    assert len(ops) == len(sim.timeline)
    assert len(nested) == 3 * len(ops)  # vision, reshard, llm in every op
    for op in ops:
        inside = [e for e in nested if e["args"]["microbatch"] == op["args"]["microbatch"]
                  and op["ts"] - 1e-6 <= e["ts"] and e["ts"] + e["dur"] <= op["ts"] + op["dur"] + 1e-6]
        assert len(inside) >= 3
        names = [e["name"] for e in sorted(inside, key=lambda e: e["ts"])]
        if op["cat"] == "forward":
            assert names[:3] == ["vision dp8tp1", "reshard dp8tp1 -> dp2tp4", "llm dp2tp4"]


def test_config_cell_names_each_segment():
    from partitioner.simulate.breakdown import config_cell

    p, plan = _lesson15()
    assert config_cell(p, evaluate(p, plan).stages[0]) == "vision 8 x 1\nllm 2 x 4"
    one = Plan((Stage(0, 6, 8, 2, 4),)).with_device_ids()
    assert config_cell(p, evaluate(p, one).stages[0]) == "2 x 4"


def test_split_ops_of_a_zero_bubble_timeline():
    """With W ops (zero-bubble), B shows the input-gradient parts with the reshard, W only the segments' W."""
    from dataclasses import replace

    from partitioner.simulate.engine import Op, Simulation

    p, plan = _lesson15()
    ev = evaluate(p, plan)
    parts, = stage_parts(p, ev)
    seg = [x for x in parts if x.kind == "segment"]
    # the example gives no split: W is half of each segment's backward
    assert [x.weight_ms for x in seg] == pytest.approx([x.bwd_ms / 2 for x in seg])
    f = sum(x.op_ms("F") for x in parts)
    b = sum(x.op_ms("B", split_backward=True) for x in parts)
    w = sum(x.op_ms("W") for x in parts)
    assert f == pytest.approx(ev.stages[0].fwd_ms) and b + w == pytest.approx(ev.stages[0].bwd_ms)
    timeline = (Op(0, "F", 0, 0.0, f), Op(0, "B", 0, f, f + b), Op(0, "W", 0, f + b, f + b + w))
    sim = Simulation("zb-h1", 1, (f,), (b + w,), timeline, stage_parts=(parts,))
    ax = gantt(sim).axes[0]
    hatched = [bar for bar in ax.patches if bar.get_hatch()]
    r = ev.stages[0].reshard_ms
    assert [bar.get_width() for bar in hatched] == pytest.approx([r, r])  # in F and in B, not in W
    # W: llm's W first, then vision's, filling the op exactly
    w_bars = [bar for bar in ax.patches if bar.get_x() >= f + b - 1e-12 and not bar.get_hatch()][1:]
    assert [bar.get_width() for bar in w_bars] == pytest.approx([seg[1].weight_ms, seg[0].weight_ms])
    assert replace(sim, stage_parts=None) == sim  # the parts are drawing data, not part of a simulation's identity
