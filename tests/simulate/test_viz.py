"""Gantt chart and Chrome trace of a simulation."""
from __future__ import annotations

import json

import pytest

from partitioner import load_problem, simulate, solve
from partitioner.simulate.engine import simulate_times
from partitioner.simulate.viz import chrome_trace, gantt, save_gantt, write_trace


def png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG file"
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def test_gantt_draws_every_op_with_its_microbatch():
    sim = simulate_times([2.0] * 3, [4.0] * 3, 4, "1f1b")
    fig = gantt(sim, "equal stages")
    ax = fig.axes[0]
    # one grey idle band per stage behind one box per op
    assert len(ax.patches) == sim.num_stages + len(sim.timeline)
    colors = {tuple(p.get_facecolor()) for p in ax.patches[sim.num_stages :]}
    assert len(colors) == 2  # forward and backward
    numbers = sorted(t.get_text() for t in ax.texts)
    assert numbers == sorted(str(op.microbatch) for op in sim.timeline)
    assert f"makespan {sim.makespan_ms:.2f} ms" in ax.get_title(loc="left")
    assert f"bubble {100 * sim.bubble_ratio:.1f} %" in ax.get_title(loc="left")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["stage 0", "stage 1", "stage 2"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["forward", "backward", "idle"]


def test_gantt_skips_numbers_that_do_not_fit():
    sim = simulate_times([100.0, 0.01], [100.0, 0.01], 2, "1f1b")
    ax = gantt(sim).axes[0]
    assert 0 < len(ax.texts) < len(sim.timeline)


def test_save_png_svg(tmp_path):
    sim = simulate_times([1.0, 2.0], [2.0, 4.0], 3, "gpipe")
    w, h = png_size(save_gantt(sim, tmp_path / "g.png"))
    assert w > 600 and h > 150
    svg = save_gantt(sim, tmp_path / "g.svg").read_text()
    assert "<svg" in svg
    with pytest.raises(ValueError, match="suffix"):
        save_gantt(sim, tmp_path / "g.gif")


def test_chrome_trace_fields(examples):
    problem = load_problem(examples / "vla_toy_2x4.json")
    plan = solve(problem, "brute").plan
    sim = simulate(problem, plan)
    doc = json.loads(json.dumps(chrome_trace(sim)))
    events = doc["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    assert len(ops) == len(sim.timeline)
    for e, op in zip(ops, sim.timeline):
        assert e["tid"] == op.stage
        assert e["name"] == f"{op.kind}{op.microbatch}"
        assert e["ts"] == pytest.approx(op.start * 1000)  # microseconds
        assert e["dur"] == pytest.approx(op.duration * 1000)
    meta = [e for e in events if e["ph"] == "M"]
    assert [e["args"]["name"] for e in meta if e["name"] == "process_name"]
    threads = {e["tid"]: e["args"]["name"] for e in meta if e["name"] == "thread_name"}
    assert sorted(threads) == list(range(plan.num_stages))
    counters = [e for e in events if e["ph"] == "C"]
    for p in range(plan.num_stages):
        series = [(e["ts"], e["args"]["bytes"]) for e in counters if e["name"] == f"memory stage {p}"]
        assert max(v for _, v in series) == sim.peak_memory_bytes[p]
        # weights from the start; stage 0 begins F0 at once, the others wait for it
        assert series[0] == (0.0, sim.weight_bytes[p] + (sim.act_bytes[p] if p == 0 else 0))
        assert len({t for t, _ in series}) == len(series)  # one value per instant


def test_chrome_trace_without_memory_counts_microbatches():
    sim = simulate_times([1.0, 1.0], [1.0, 1.0], 3, "1f1b")
    counters = [e for e in chrome_trace(sim)["traceEvents"] if e["ph"] == "C"]
    assert {e["name"] for e in counters} == {"in-flight stage 0", "in-flight stage 1"}
    assert max(e["args"]["microbatches"] for e in counters if e["name"] == "in-flight stage 0") == 2


@pytest.mark.slow
def test_cli_gantt_and_trace(tmp_path, cli, examples):
    problem = examples / "vla_toy_2x4.json"
    r = cli("solve", problem, "--method", "brute", "--json")
    assert r.returncode == 0, r.stderr
    result = tmp_path / "result.json"
    result.write_text(r.stdout)
    r = cli("simulate", problem, result, "--gantt", tmp_path / "g.png", "--trace", tmp_path / "t.json")
    assert r.returncode == 0, r.stderr
    assert "wrote Gantt chart" in r.stdout and "wrote Chrome trace" in r.stdout
    w, h = png_size(tmp_path / "g.png")
    assert w > 1000 and h > 400
    doc = json.loads((tmp_path / "t.json").read_text())
    phases = {e["ph"] for e in doc["traceEvents"]}
    assert {"X", "M", "C"} <= phases
    assert all({"ts", "dur", "pid", "tid"} <= set(e) for e in doc["traceEvents"] if e["ph"] == "X")
    # with --json the file notices go to stderr and stdout stays JSON
    r = cli("simulate", problem, result, "--json", "--trace", tmp_path / "t2.json")
    assert r.returncode == 0 and json.loads(r.stdout)["makespan_ms"] > 0
    assert "wrote Chrome trace" in r.stderr


def test_write_trace_round_trips(tmp_path):
    sim = simulate_times([1.0, 2.0], [1.0, 2.0], 2, "1f1b")
    path = write_trace(sim, tmp_path / "t.json", "toy")
    assert json.loads(path.read_text()) == json.loads(json.dumps(chrome_trace(sim, "toy")))


def test_gantt_and_trace_show_weight_gradients_apart():
    sim = simulate_times([2.0] * 3, [4.0] * 3, 4, "zb-h1", wgrad_ms=[1.5] * 3)
    ax = gantt(sim).axes[0]
    assert len(ax.patches) == sim.num_stages + len(sim.timeline)
    colors = {tuple(p.get_facecolor()) for p in ax.patches[sim.num_stages :]}
    assert len(colors) == 3  # forward, input gradient, weight gradient
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["forward", "backward (input grad)", "weight grad", "idle"]
    ops = [e for e in chrome_trace(sim)["traceEvents"] if e["ph"] == "X"]
    assert {e["cat"] for e in ops} == {"forward", "backward", "weight-gradient"}
    w = [e for e in ops if e["cat"] == "weight-gradient"]
    assert len(w) == 3 * 4 and all(e["name"].startswith("W") and e["dur"] == 1500.0 for e in w)
    assert all(e["dur"] == 2500.0 for e in ops if e["cat"] == "backward")  # B = 4 - 1.5


def test_gantt_and_trace_show_chunks_apart():
    P, v, m = 2, 2, 4
    sim = simulate_times([1.0] * (P * v), [2.0] * (P * v), m, "interleaved", virtual_stages=v)
    ax = gantt(sim).axes[0]
    assert len(ax.patches) == P + len(sim.timeline)  # one row per device group
    colors = {tuple(p.get_facecolor()) for p in ax.patches[P:]}
    assert len(colors) == 2 * v  # forward and backward, one shade per chunk of a device
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "forward, chunk 1/2", "forward, chunk 2/2", "backward, chunk 1/2", "backward, chunk 2/2", "idle"
    ]
    doc = chrome_trace(sim)
    ops = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["tid"] for e in ops} == {0, 1}
    assert {(e["tid"], e["args"]["chunk"]) for e in ops} == {(0, 0), (0, 2), (1, 1), (1, 3)}
    assert all(e["name"].endswith(f" c{e['args']['chunk']}") for e in ops)
    assert doc["otherData"]["virtual_stages"] == v
