"""Export of plans to Megatron-LM, torchtitan and DeepSpeed settings."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from partitioner.costs import build_problem
from partitioner.export import export_plan, export_result, hints_from_problem, megatron_layout, parse_megatron_layout
from partitioner.plan import Plan, SolveResult, Stage, evaluate
from partitioner.problem import ProblemError
from tests.conftest import run_cli


@pytest.fixture(scope="module")
def seed_problem():
    # seed toy on one node: 25 vision+projector layers, embed, 32 decoder layers, 6 action layers
    return build_problem("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=64, microbatches=16, options={"zero1": True})


def index(problem, name):
    return [layer.name for layer in problem.layers].index(name)


def decoder_counts(problem, plan):
    hints = hints_from_problem(problem)
    return [sum(hints[i]["role"] == "decoder" for i in s.layers) for s in plan.stages]


def uniform_llm_plan(problem):
    # vision + projector + embed + llm.0-7 | llm.8-15 | llm.16-23 | llm.24-31 + action head, all dp2 x tp1
    e = index(problem, "llm.7")
    cuts = [(0, e), (e + 1, e + 8), (e + 9, e + 16), (e + 17, problem.num_layers - 1)]
    return Plan(tuple(Stage(a, b, 2, 2, 1) for a, b in cuts))


def test_uniform_llm_layout_string_parses_back_to_the_layer_counts(seed_problem):
    plan = uniform_llm_plan(seed_problem)
    exp = export_plan(plan, hints_from_problem(seed_problem), "megatron", microbatch_size=8, global_batch=64)
    assert exp.expressible
    layout = exp.settings["pipeline_model_parallel_layout"]
    stages = parse_megatron_layout(layout)
    assert [s.count("t") for s in stages] == decoder_counts(seed_problem, plan) == [8, 8, 8, 8]
    flat = [c for s in stages for c in s]
    assert flat[0] == "E" and flat[-1] == "L" and flat.count("E") == flat.count("L") == 1
    assert exp.settings["tensor_model_parallel_size"] == 1 and exp.settings["pipeline_model_parallel_size"] == 4
    assert f'--pipeline-model-parallel-layout "{layout}"' in exp.snippet
    assert "--micro-batch-size 4" in exp.snippet  # 8 samples per microbatch over dp 2
    assert any("action head" in n or "no LM loss" in n for n in exp.notes)


def test_uneven_cuts_round_trip(seed_problem):
    e = index(seed_problem, "llm.0")
    cuts = [(0, e + 2), (e + 3, e + 12), (e + 13, e + 25), (e + 26, seed_problem.num_layers - 1)]
    plan = Plan(tuple(Stage(a, b, 2, 1, 2) for a, b in cuts))
    exp = export_plan(plan, hints_from_problem(seed_problem), "megatron")
    stages = parse_megatron_layout(exp.settings["pipeline_model_parallel_layout"])
    assert [s.count("t") for s in stages] == decoder_counts(seed_problem, plan) == [3, 10, 13, 6]
    assert "--sequence-parallel" in exp.snippet and "--tensor-model-parallel-size 2" in exp.snippet


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5), st.booleans()), min_size=1, max_size=12))
def test_megatron_layout_round_trip(stages):
    symbols = [("E" if e else "") + (("t" if n == 1 else f"t*{n}") if n else "") + ("L" if l else "") for e, n, l in stages]
    parsed = parse_megatron_layout(megatron_layout(symbols))
    expected = [["E"] * e + ["t"] * n + ["L"] * l for e, n, l in stages]
    assert parsed == expected


def test_parse_rejects_unknown_symbols():
    with pytest.raises(ValueError, match="'x'"):
        parse_megatron_layout("Et|x|L")
    assert parse_megatron_layout("Et*3|(tt|)*2,m|L") == [list("Ettt"), list("tt"), list("tt"), ["m"], ["L"]]


def test_separate_vision_mesh_gives_encoder_grid_flags(seed_problem):
    p = index(seed_problem, "projector")
    e = index(seed_problem, "llm.15")
    plan = Plan((Stage(0, p, 2, 2, 1), Stage(p + 1, e, 4, 2, 2), Stage(e + 1, seed_problem.num_layers - 1, 2, 2, 1)))
    exp = export_plan(plan, hints_from_problem(seed_problem), "megatron")
    # the language stages differ in layout here, so check the vision grid only
    grid = exp.settings["mimo_module_parallelisms"]
    assert grid["vision"] == {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "data_parallel_size": 2, "rank_offset": 0}
    assert not exp.expressible and any("different layouts" in n for n in exp.notes)


def test_vision_mesh_with_decoder_dp_uses_megatron_encoder_flags(seed_problem):
    p = index(seed_problem, "projector")
    e = index(seed_problem, "llm.15")
    plan = Plan((Stage(0, p, 2, 2, 1), Stage(p + 1, e, 4, 2, 2), Stage(e + 1, seed_problem.num_layers - 1, 4, 2, 2)))
    exp = export_plan(plan, hints_from_problem(seed_problem), "megatron")
    assert exp.expressible
    assert "--encoder-pipeline-model-parallel-size 1" in exp.snippet
    assert "--encoder-tensor-model-parallel-size 1" in exp.snippet
    assert exp.settings["mimo_module_parallelisms"]["language"]["rank_offset"] == 2
    stages = parse_megatron_layout(exp.settings["pipeline_model_parallel_layout"])
    assert [s.count("t") for s in stages] == [16, 16]


def test_vision_dp_different_from_language_needs_the_mimo_grid(seed_problem):
    p = index(seed_problem, "projector")
    plan = Plan((Stage(0, p, 4, 4, 1), Stage(p + 1, seed_problem.num_layers - 1, 4, 1, 4)))
    exp = export_plan(plan, hints_from_problem(seed_problem), "megatron")
    assert "--encoder-pipeline-model-parallel-size" not in exp.snippet
    grid = exp.settings["mimo_module_parallelisms"]
    assert grid["vision"]["data_parallel_size"] == 4 and grid["language"]["tensor_model_parallel_size"] == 4
    assert any("MIMO" in n for n in exp.notes)


def test_torchtitan_and_deepspeed(seed_problem):
    plan = uniform_llm_plan(seed_problem)
    hints = hints_from_problem(seed_problem)
    tt = export_plan(plan, hints, "torchtitan", microbatch_size=8)
    parts = tt.settings["module_fqns_per_model_part"]
    assert len(parts) == 4 and [f for part in parts for f in part] == [f for h in hints for f in h["fqns"]]
    assert parts[1][0] == "llm.layers.8" and tt.settings["tensor_parallel_degree"] == 1
    assert "module_fqns_per_model_part = [" in tt.snippet and tt.expressible
    ds = export_plan(plan, hints, "deepspeed")
    assert ds.settings["parts"] == [s.first_layer for s in plan.stages] + [seed_problem.num_layers]
    assert "PipeModelDataParallelTopology(num_pp=4, num_mp=1, num_dp=2)" in ds.snippet
    mixed = Plan((Stage(0, 30, 4, 4, 1), Stage(31, seed_problem.num_layers - 1, 4, 1, 4)))
    for target in ("torchtitan", "deepspeed"):
        exp = export_plan(mixed, hints, target)
        assert not exp.expressible and any("same" in n for n in exp.notes)


def test_export_result_needs_hints():
    doc = {"status": "optimal", "method": "dp", "objective": "iteration",
           "plan": {"stages": [{"first_layer": 0, "last_layer": 1, "devices": 1, "dp": 1, "tp": 1}]}}
    with pytest.raises(ProblemError, match="export_hints"):
        export_result(doc, "megatron")
    with pytest.raises(ProblemError, match="no plan"):
        export_result(dict(doc, plan=None), "megatron")
    with pytest.raises(ProblemError, match="unknown export target"):
        export_plan(Plan.from_dict(doc), [{"name": "a", "role": "decoder"}, {"name": "b", "role": "decoder"}], "colossal")


def test_export_cli_on_a_solve_result_with_problem(tmp_path, seed_problem):
    from partitioner.problem import dump_problem

    prob_path = tmp_path / "p.json"
    dump_problem(seed_problem, prob_path)
    plan = uniform_llm_plan(seed_problem)
    ev = evaluate(seed_problem, plan)
    res = SolveResult("feasible", "hand", "iteration", value=ev.value, plan=plan.with_device_ids(), evaluation=ev)
    res_path = tmp_path / "r.json"
    res_path.write_text(json.dumps(res.to_dict()))
    proc = run_cli("export", str(res_path), "--to", "megatron", "--problem", str(prob_path))
    assert proc.returncode == 0, proc.stderr
    assert "--pipeline-model-parallel-layout" in proc.stdout
    proc = run_cli("export", str(res_path), "--to", "megatron")
    assert proc.returncode == 2 and "export_hints" in proc.stderr and "r.json" in proc.stderr
    proc = run_cli("export", str(res_path), "--to", "fsdp", "--problem", str(prob_path))
    assert proc.returncode == 2 and "--to" in proc.stderr
