"""Export of plans to Megatron, torchtitan and DeepSpeed settings (no framework installed needed).

The framework tier (the rest of ``tests/frameworks/``) runs the same exports through the frameworks' own code.
"""
from __future__ import annotations

import ast
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.costs import build_problem
from partitioner.frameworks import RULES, TARGETS
from partitioner.frameworks.export import (
    ExportContext,
    export_plan,
    export_result,
    hints_from_problem,
    layer_hints,
    megatron_layout,
    parse_megatron_layout,
)
from partitioner.plan import Plan, SolveResult, Stage, evaluate
from partitioner.problem import SCHEDULES, Layout, ProblemError
from strategies import examples
from tests.conftest import run_cli

G, M = 64, 16  # the seed problem's global batch and microbatches: 4 samples per microbatch


@pytest.fixture(scope="module")
def seed_problem():
    # seed toy on one node: 24 vision layers, projector, embed, 32 decoder layers, 6 action layers
    return build_problem("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=G, microbatches=M, options={"zero1": True})


@pytest.fixture(scope="module")
def hints(seed_problem):
    return hints_from_problem(seed_problem)


def index(problem, name):
    return [layer.name for layer in problem.layers].index(name)


def decoder_counts(hints, plan):
    return [sum(hints[i].role == "decoder" for i in s.layers) for s in plan.stages]


def uniform_llm_plan(problem):
    # vision + projector + embed + llm.0-7 | llm.8-15 | llm.16-23 | llm.24-31 + action head, all dp2 x tp1
    e = index(problem, "llm.7")
    cuts = [(0, e), (e + 1, e + 8), (e + 9, e + 16), (e + 17, problem.num_layers - 1)]
    return Plan(tuple(Stage(a, b, 2, 2, 1) for a, b in cuts))


def vision_stage_plan(problem, vision=(4, 4, 1), llm=(2, 1, 2)):
    """Vision + projector on their own stage, then two language stages (the action head on the last)."""
    p, e = index(problem, "projector"), index(problem, "llm.15")
    return Plan((Stage(0, p, *vision), Stage(p + 1, e, *llm), Stage(e + 1, problem.num_layers - 1, *llm)))


def v2_stage(first, last, devices, configs):
    return Stage.from_configs(first, last, devices, tuple(configs))


# --------------------------------------------------------------------------- Megatron


def test_uniform_llm_layout_string_parses_back_to_the_layer_counts(seed_problem, hints):
    plan = uniform_llm_plan(seed_problem)
    exp = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert exp.expressible and not exp.reasons and exp.settings["path"] == "megatron-lm"
    core = exp.settings["transformer_config"]
    stages = parse_megatron_layout(core["pipeline_model_parallel_layout"])
    assert [s.count("t") for s in stages] == decoder_counts(hints, plan) == [8, 8, 8, 8]
    flat = [c for s in stages for c in s]
    assert flat[0] == "E" and flat[-1] == "L" and flat.count("E") == flat.count("L") == 1
    assert core == {"num_layers": 32, "tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 4,
                    "pipeline_model_parallel_layout": core["pipeline_model_parallel_layout"], "sequence_parallel": False,
                    "bf16": True}
    assert f'--pipeline-model-parallel-layout "{core["pipeline_model_parallel_layout"]}"' in exp.snippet
    # m = 64 / (2 x dp 2) = 16 = the plan's m
    assert "--micro-batch-size 2" in exp.snippet and "--global-batch-size 64" in exp.snippet
    assert exp.settings["training"] == {"micro_batch_size": 2, "global_batch_size": 64, "microbatches": 16}
    assert any("no LM loss" in n for n in exp.notes) and any("pipeline_model_parallel_layout = None" in n for n in exp.notes)
    assert "--encoder-" not in exp.snippet and "CUDA_DEVICE_MAX_CONNECTIONS" not in exp.snippet
    assert "megatron-core 0.16.1" in exp.checked_with


def test_uneven_cuts_round_trip_and_tp_notes(seed_problem, hints):
    e = index(seed_problem, "llm.0")
    cuts = [(0, e + 2), (e + 3, e + 12), (e + 13, e + 25), (e + 26, seed_problem.num_layers - 1)]
    plan = Plan(tuple(Stage(a, b, 2, 1, 2) for a, b in cuts))
    exp = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    stages = parse_megatron_layout(exp.settings["transformer_config"]["pipeline_model_parallel_layout"])
    assert [s.count("t") for s in stages] == decoder_counts(hints, plan) == [3, 10, 13, 6]
    assert "--sequence-parallel" in exp.snippet and "--tensor-model-parallel-size 2" in exp.snippet
    assert exp.settings["env"] == {"CUDA_DEVICE_MAX_CONNECTIONS": "1"} and "CUDA_DEVICE_MAX_CONNECTIONS=1" in exp.snippet
    assert "--micro-batch-size 4" in exp.snippet  # dp 1


@settings(max_examples=examples(60), deadline=None)
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


def test_microbatch_that_does_not_split_over_dp_is_not_expressible(seed_problem, hints):
    # 4 samples per microbatch over dp 8: no per-replica micro batch gives m = 16
    plan = Plan((Stage(0, seed_problem.num_layers - 1, 8, 8, 1),))
    for target in ("megatron", "torchtitan", "deepspeed"):
        exp = export_plan(plan, hints, target, ExportContext(global_batch=G, microbatches=M))
        assert not exp.expressible and any("does not split over dp 8" in r for r in exp.reasons), target
        assert "--micro-batch-size" not in exp.snippet and "local_batch_size" not in exp.snippet


def test_vision_stage_gives_a_heterogeneous_mimo_grid_that_tiles_the_world(seed_problem, hints):
    plan = vision_stage_plan(seed_problem)
    exp = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert exp.expressible and exp.settings["path"] == "mimo", exp.reasons
    grid = exp.settings["mimo"]
    assert grid["llm_module_name"] == "llm" and grid["deployment_mode"] == "heterogeneous"
    mods = grid["module_parallelisms"]
    assert mods["vision"] == {"tensor_model_parallel_size": 1, "pipeline_model_parallel_size": 1, "data_parallel_size": 4, "rank_offset": 0}
    assert mods["llm"] == {"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 2, "data_parallel_size": 1, "rank_offset": 4}
    assert "--encoder-" not in exp.snippet and "encoder_" not in json.dumps(exp.settings)
    compile(exp.snippet, "<mimo>", "exec")
    # a grid for the user's MIMO model, not a launch: said in the settings, the snippet and a note
    assert exp.settings["launch"] == "template" and exp.snippet.startswith("# TEMPLATE, not a launch")
    assert any(n.startswith("template:") for n in exp.notes)
    layout = parse_megatron_layout(exp.settings["llm_transformer_config"]["pipeline_model_parallel_layout"])
    assert [s.count("t") for s in layout] == [16, 16]
    assert any("Megatron-LM flags cannot run it" in n and "removed" in n for n in exp.notes)


def test_mimo_grid_needs_one_layout_per_module_and_consecutive_ranks(seed_problem, hints):
    p, e = index(seed_problem, "projector"), index(seed_problem, "llm.15")
    n = seed_problem.num_layers - 1
    mixed = Plan((Stage(0, p, 4, 4, 1), Stage(p + 1, e, 2, 1, 2), Stage(e + 1, n, 2, 2, 1)))
    exp = export_plan(mixed, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert not exp.expressible and exp.settings["path"] is None
    assert any(r.startswith("MIMO: MIMO module 'llm'") and "one layout" in r for r in exp.reasons)
    assert any(r.startswith("Megatron-LM:") for r in exp.reasons)
    # the language stages interleaved with the vision stage's GPUs: no rank_offset describes them
    scattered = Plan((Stage(0, p, 4, 4, 1, (0, 1, 4, 5)), Stage(p + 1, e, 2, 1, 2, (2, 3)), Stage(e + 1, n, 2, 1, 2, (6, 7))))
    exp = export_plan(scattered, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert not exp.expressible and any("consecutive ranks" in r for r in exp.reasons)


def test_action_only_stage_is_not_expressible_in_megatron(seed_problem, hints):
    a = index(seed_problem, "action_head.0")
    plan = Plan((Stage(0, a - 1, 4, 2, 2), Stage(a, seed_problem.num_layers - 1, 4, 2, 2)))
    exp = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert not exp.expressible and any("action head" in r for r in exp.reasons)
    assert any(r.startswith("MIMO:") and "action head" in r for r in exp.reasons)


# --------------------------------------------------------------------------- torchtitan


def _top_level_or_entry(name):
    return re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.\d+)?", name) is not None


def test_torchtitan_names_are_top_level_children_its_split_keeps(seed_problem, hints):
    plan = uniform_llm_plan(seed_problem)
    tt = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M))
    assert tt.expressible and "torchtitan 0.3.0" in tt.checked_with
    parts = tt.settings["module_fqns_per_model_part"]
    names = [n for part in parts for n in part]
    assert len(names) == len(set(names)) and all(_top_level_or_entry(n) for n in names)
    assert parts[0][:3] == ["vision_encoder", "tok_embeddings", "layers.0"] and parts[1][0] == "layers.8"
    assert [sum(n.startswith("layers.") for n in part) for part in parts] == decoder_counts(hints, plan)
    # every Hugging Face module of the preset stands behind exactly one torchtitan name
    sources = [f for fs in tt.settings["fqn_map"].values() for f in fs]
    assert sorted(sources) == sorted({f for h in hints for f in h.fqns})
    cfg = tt.settings["config"]
    # the plan's stages are plain (ZeRO-0): dp 2 replicated, no FSDP sharding (issue 27: exports carry the knobs)
    assert cfg["parallelism"]["pipeline_parallel_degree"] == 4
    assert (cfg["parallelism"]["data_parallel_replicate_degree"], cfg["parallelism"]["data_parallel_shard_degree"]) == (2, 1)
    # torchtitan's m = local_batch_size / microbatch size = (64 / dp 2) / 2 = 16
    assert cfg["training"]["local_batch_size"] // cfg["parallelism"]["pipeline_parallel_microbatch_size"] == M
    assert cfg["training"]["disable_cuda_graphs"] is True
    assert "--parallelism.module_fqns_per_model_part vision_encoder,tok_embeddings,layers.0," in tt.snippet
    compile(tt.snippet.split("# or, as a config_registry function:\n", 1)[1], "<config_registry>", "exec")


def test_torchtitan_rejects_vision_off_the_embedding_stage_and_mixed_layouts(seed_problem, hints):
    plan = vision_stage_plan(seed_problem, vision=(4, 2, 2), llm=(2, 1, 2))
    tt = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M))
    assert not tt.expressible and any("vision_encoder, whole" in r for r in tt.reasons)
    assert "module_fqns_per_model_part" not in tt.snippet
    inside = Plan((Stage(0, 11, 4, 4, 1), Stage(12, seed_problem.num_layers - 1, 4, 4, 1)))
    tt = export_plan(inside, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M))
    assert not tt.expressible and any("inside the vision encoder" in r for r in tt.reasons)
    mixed = Plan((Stage(0, 30, 4, 4, 1), Stage(31, seed_problem.num_layers - 1, 4, 1, 4)))
    for target in ("torchtitan", "deepspeed"):
        exp = export_plan(mixed, hints, target, ExportContext(global_batch=G, microbatches=M))
        assert not exp.expressible and any("same" in r for r in exp.reasons), target


# --------------------------------------------------------------------------- DeepSpeed


def test_deepspeed_snippets_are_valid_python(seed_problem, hints):
    plan = uniform_llm_plan(seed_problem)
    ds = export_plan(plan, hints, "deepspeed", ExportContext(global_batch=G, microbatches=M))
    assert ds.expressible and ds.settings["parts"] == [s.first_layer for s in plan.stages] + [seed_problem.num_layers]
    assert "PipeModelDataParallelTopology(num_pp=4, num_mp=1, num_dp=2)" in ds.snippet
    assert ds.settings["ds_config"] == {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 16,
                                              "zero_optimization": {"stage": 0}, "bf16": {"enabled": True}}
    ast.parse(ds.snippet)
    mixed = Plan((Stage(0, 30, 4, 4, 1), Stage(31, seed_problem.num_layers - 1, 4, 1, 4)))
    ds = export_plan(mixed, hints, "deepspeed", ExportContext(global_batch=G, microbatches=M))
    assert not ds.expressible
    ast.parse(ds.snippet)
    compile(ds.text(), "<text>", "exec")  # the paste-ready text is Python too: reasons and notes are comments


# --------------------------------------------------------------------------- format v2: per-segment configs


def test_a_stage_with_two_layouts_is_colocated_mimo_and_nothing_else(seed_problem, hints):
    # seed lesson 15 on one 8-GPU stage: vision dp 8, projector + language + action dp 2 x tp 4
    lang = Layout(2, 4)
    plan = Plan((v2_stage(0, seed_problem.num_layers - 1, 8, [Layout(8, 1), lang, lang, lang]),))
    meg = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=8))  # 8 samples: one per vision replica
    assert meg.expressible and meg.settings["mimo"]["deployment_mode"] == "colocated", meg.reasons
    mods = meg.settings["mimo"]["module_parallelisms"]
    assert mods["vision"]["data_parallel_size"] == 8 and mods["llm"]["tensor_model_parallel_size"] == 4
    assert all(m["rank_offset"] == 0 for m in mods.values())
    assert any("two layouts" in n for n in meg.notes)
    for target in ("torchtitan", "deepspeed"):
        exp = export_plan(plan, hints, target, ExportContext(global_batch=G, microbatches=8))
        assert not exp.expressible and any("two layouts on the same GPUs" in r for r in exp.reasons), target


def test_two_layouts_on_part_of_the_world_are_not_expressible(seed_problem, hints):
    e = index(seed_problem, "llm.15")
    plan = Plan((v2_stage(0, e, 4, [Layout(4, 1), Layout(1, 4), Layout(1, 4)]), Stage(e + 1, seed_problem.num_layers - 1, 4, 1, 4)))
    meg = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M))
    assert not meg.expressible and any("colocated" in r for r in meg.reasons)
    with pytest.raises(ProblemError, match="module segments"):
        export_plan(Plan((v2_stage(0, e, 4, [Layout(4, 1), Layout(1, 4)]), Stage(e + 1, seed_problem.num_layers - 1, 4, 1, 4))), hints, "megatron")


# --------------------------------------------------------------------------- results and the CLI


def test_export_result_needs_hints():
    doc = {"status": "optimal", "method": "dp", "objective": "iteration",
           "plan": {"stages": [{"first_layer": 0, "last_layer": 1, "devices": 1, "dp": 1, "tp": 1}]}}
    with pytest.raises(ProblemError, match="export_hints"):
        export_result(doc, "megatron")
    with pytest.raises(ProblemError, match="no plan"):
        export_result(dict(doc, plan=None), "megatron")
    with pytest.raises(ProblemError, match="unknown export target"):
        export_plan(Plan.from_dict(doc), layer_hints([{"name": "a", "role": "decoder"}, {"name": "b", "role": "decoder"}]), "colossal")


@pytest.mark.slow
def test_export_cli_exit_codes(tmp_path, seed_problem):
    from partitioner.problem import dump_problem

    prob_path = tmp_path / "p.json"
    dump_problem(seed_problem, prob_path)

    def write(plan, name):
        ev = evaluate(seed_problem, plan)
        res = SolveResult("feasible", "hand", "iteration", value=ev.value, plan=plan.with_device_ids(), evaluation=ev)
        path = tmp_path / name
        path.write_text(json.dumps(res.to_dict()))
        return path

    good = write(uniform_llm_plan(seed_problem), "r.json")
    proc = run_cli("export", str(good), "--to", "megatron", "--problem", str(prob_path))
    assert proc.returncode == 0, proc.stderr
    assert "--pipeline-model-parallel-layout" in proc.stdout and "--micro-batch-size 2" in proc.stdout
    proc = run_cli("export", str(good), "--to", "megatron")
    assert proc.returncode == 2 and "export_hints" in proc.stderr and "r.json" in proc.stderr
    proc = run_cli("export", str(good), "--to", "fsdp", "--problem", str(prob_path))
    assert proc.returncode == 2 and "--to" in proc.stderr
    mixed = write(Plan((Stage(0, 30, 4, 4, 1), Stage(31, seed_problem.num_layers - 1, 4, 1, 4))), "mixed.json")
    proc = run_cli("export", str(mixed), "--to", "deepspeed", "--problem", str(prob_path), "--json")
    assert proc.returncode == 1 and "not expressible in deepspeed" in proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["expressible"] is False and doc["reasons"]


def test_variants_go_into_the_settings_not_a_note(seed_problem, hints):
    """Issue 27: the plan's knobs are set by the export (no "set it yourself" note)."""
    plan = Plan(tuple(Stage(s.first_layer, s.last_layer, s.devices, s.dp, s.tp, variant="zero1") for s in uniform_llm_plan(seed_problem).stages))
    exp = export_plan(plan, hints, "deepspeed", ExportContext(global_batch=G, microbatches=M))
    assert exp.expressible and exp.settings["ds_config"]["zero_optimization"] == {"stage": 1}
    assert not any("set the framework" in n for n in exp.notes)


def test_stages_out_of_rank_order_get_a_placement_note(seed_problem, hints):
    plan = uniform_llm_plan(seed_problem)
    swapped = Plan(tuple(Stage(s.first_layer, s.last_layer, 2, 2, 1, ids) for s, ids in
                         zip(plan.stages, [(2, 3), (0, 1), (4, 5), (6, 7)])))
    assert not any("rank order" in n for n in export_plan(plan, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M)).notes)
    exp = export_plan(swapped, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M))
    assert exp.expressible and any("not in rank order" in n and "0: 2..3" in n for n in exp.notes)


# --------------------------------------------------------------------------- schedules


def interleaved_plan(problem, v=2, groups=2):
    """uniform_llm_plan's cuts as P·v chunks, chunk c on group c mod P (4 GPUs each, dp 4)."""
    cuts = [(s.first_layer, s.last_layer) for s in uniform_llm_plan(problem).stages]
    assert len(cuts) == groups * v
    ids = [tuple(range(4 * g, 4 * g + 4)) for g in range(groups)]
    return Plan(tuple(Stage(a, b, 4, 4, 1, ids[c % groups]) for c, (a, b) in enumerate(cuts)))


def test_interleaved_plan_is_checked_by_evaluate(seed_problem):
    from partitioner.planning.schedules.search import with_schedule

    problem = with_schedule(seed_problem, "interleaved", 2)
    ev = evaluate(problem, interleaved_plan(seed_problem))
    assert ev.schedule == "interleaved" and ev.virtual_stages == 2


def test_megatron_interleaved_layout_lists_the_chunks(seed_problem, hints):
    plan = interleaved_plan(seed_problem)
    exp = export_plan(plan, hints, "megatron", ExportContext(global_batch=G, microbatches=M, schedule="interleaved", virtual_stages=2))
    assert exp.expressible, exp.reasons
    core = exp.settings["transformer_config"]
    assert core["pipeline_model_parallel_size"] == 2 and core["virtual_pipeline_model_parallel_size"] == 2
    stages = parse_megatron_layout(core["pipeline_model_parallel_layout"])
    assert len(stages) == 4  # P·v: Megatron-LM derives vpp = 4 / 2
    assert [s.count("t") for s in stages] == decoder_counts(hints, plan)
    assert "--pipeline-model-parallel-size 2" in exp.snippet
    # Megatron-LM refuses --num-virtual-stages-per-pipeline-rank together with a layout: never emitted
    assert "--num-virtual" not in exp.snippet
    assert any("4 stages give it" in n for n in exp.notes)
    # data parallel over the 4 GPUs of a group: 2 x dp 4 x tp 1 = 8 GPUs
    assert exp.settings["data_parallel_size"] == 4


@pytest.mark.parametrize("schedule", ["zb-h1", "gpipe"])
def test_megatron_says_plainly_it_lacks_zb_h1_and_gpipe(seed_problem, hints, schedule):
    exp = export_plan(uniform_llm_plan(seed_problem), hints, "megatron", ExportContext(global_batch=G, microbatches=M, schedule=schedule))
    assert not exp.expressible
    assert any(f"schedule {schedule} is not expressible" in r for r in exp.reasons)
    assert "--pipeline-model-parallel-layout" not in exp.snippet


@pytest.mark.parametrize("schedule,name", [("1f1b", "1F1B"), ("gpipe", "GPipe"), ("interleaved", "Interleaved1F1B")])
def test_torchtitan_names_the_schedule(seed_problem, hints, schedule, name):
    v = 2 if schedule == "interleaved" else 1
    plan = interleaved_plan(seed_problem) if v > 1 else uniform_llm_plan(seed_problem)
    exp = export_plan(plan, hints, "torchtitan", ExportContext(global_batch=G, microbatches=M, schedule=schedule, virtual_stages=v))
    assert exp.expressible, exp.reasons
    par = exp.settings["config"]["parallelism"]
    assert par["pipeline_parallel_schedule"] == name
    assert par["pipeline_parallel_degree"] * v == len(exp.settings["module_fqns_per_model_part"]) == len(plan.stages)
    assert f"--parallelism.pipeline_parallel_schedule {name}" in exp.snippet


def test_torchtitan_refuses_zb_h1_plainly(seed_problem, hints):
    exp = export_plan(uniform_llm_plan(seed_problem), hints, "torchtitan", ExportContext(global_batch=G, microbatches=M, schedule="zb-h1"))
    assert not exp.expressible and "module_fqns_per_model_part" not in exp.settings
    assert any("zb-h1 is not expressible" in r and "ZBVZeroBubble" in r for r in exp.reasons)


@pytest.mark.parametrize("schedule", ["zb-h1", "gpipe", "interleaved"])
def test_deepspeed_runs_1f1b_only(seed_problem, hints, schedule):
    v = 2 if schedule == "interleaved" else 1
    plan = interleaved_plan(seed_problem) if v > 1 else uniform_llm_plan(seed_problem)
    exp = export_plan(plan, hints, "deepspeed", ExportContext(global_batch=G, microbatches=M, schedule=schedule, virtual_stages=v))
    assert not exp.expressible and f"schedule {schedule} is not expressible" in exp.reasons[0]
    assert export_plan(uniform_llm_plan(seed_problem), hints, "deepspeed", ExportContext(global_batch=G, microbatches=M,
                       schedule="1f1b")).expressible


def test_interleaved_chunks_off_their_group_are_not_expressible(seed_problem, hints):
    plan = interleaved_plan(seed_problem)
    stages = list(plan.stages)
    stages[2] = Stage(stages[2].first_layer, stages[2].last_layer, 4, 4, 1, (4, 5, 6, 7))  # chunk 2 belongs to group 0
    for target in ("megatron", "torchtitan"):
        exp = export_plan(Plan(tuple(stages)), hints, target, ExportContext(global_batch=G, microbatches=M, schedule="interleaved",
                          virtual_stages=2))
        assert not exp.expressible and any("chunk(s) [2]" in r for r in exp.reasons), target


@pytest.mark.slow
def test_a_result_document_carries_its_schedule_to_the_export(tmp_path, seed_problem, hints):
    plan = interleaved_plan(seed_problem)
    doc = {"status": "feasible", "method": "hand", "objective": "iteration", "plan": plan.to_dict(),
           "export_hints": {"layers": [h.to_dict() for h in hints]}, "global_batch": G, "microbatches": M,
           "schedule": {"schedule": "interleaved", "virtual_stages": 2}}
    assert export_result(doc, "torchtitan").settings["config"]["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    proc = run_cli("export", str(path), "--to", "deepspeed")
    assert proc.returncode == 1 and "schedule interleaved is not expressible" in proc.stderr
    proc = run_cli("export", str(path), "--to", "megatron")
    assert proc.returncode == 0, proc.stderr
    assert "--pipeline-model-parallel-size 2" in proc.stdout


def test_plan_result_exports_under_its_kept_schedule():
    from partitioner.planning import plan_model

    r = plan_model("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=32, microbatches=8, method="greedy",
                   schedule="interleaved", virtual_stages=2)
    tt = export_result(r, "torchtitan")
    assert tt.expressible, tt.reasons
    assert tt.settings["config"]["parallelism"]["pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert tt.settings["config"]["parallelism"]["pipeline_parallel_degree"] * 2 == len(r.plan.stages)
    # the same through the JSON document (no problem at hand)
    doc = json.loads(json.dumps(r.to_dict()))
    assert export_result(doc, "megatron").settings == export_result(r, "megatron").settings


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_each_exporter_refuses_exactly_the_schedules_its_rules_lack(seed_problem, hints, target, schedule):
    """The exporters read their home's ``RULES.schedules`` (the planner's ``--target`` reads the same record)."""
    v = 2 if schedule == "interleaved" else 1
    plan = interleaved_plan(seed_problem) if v > 1 else uniform_llm_plan(seed_problem)
    exp = export_plan(plan, hints, target, ExportContext(global_batch=G, microbatches=M, schedule=schedule, virtual_stages=v))
    refused = any(f"schedule {schedule}" in r for r in exp.reasons)
    assert refused == (schedule not in RULES[target].schedules), exp.reasons
    assert exp.expressible != refused, exp.reasons
