"""`partitioner plan` and `plan_model`: result format, baseline, throughput, never worse than the baseline."""
from __future__ import annotations

import json

import pytest

from partitioner import plan_model
from partitioner.plan import Plan, Stage, evaluate
from partitioner.planning import BASELINES, FSDP_METHOD, fsdp_baseline, megatron_baseline
from partitioner.problem import load_problem
from partitioner.solvers import base as solver_base
from partitioner.solvers.base import Candidate, register
from tests.conftest import run_cli

SMALL = ("--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "64", "--microbatches", "8")


def check_result(doc: dict, gpus: int) -> None:
    assert doc["status"] in ("optimal", "feasible")
    stages = doc["plan"]["stages"]
    assert sum(s["devices"] for s in stages) == gpus
    assert sorted(d for s in stages for d in s["device_ids"]) == list(range(gpus))
    base = doc["baseline"]  # the best baseline that fits
    assert base["method"] in BASELINES and base["plan"]["stages"]
    fitting = [b for b in doc["baselines"].values() if b["plan"]]
    assert base["iteration_ms"] == min(b["iteration_ms"] for b in fitting)
    assert len({(s["dp"], s["tp"], s["devices"]) for s in base["plan"]["stages"]}) == 1  # one layout for all stages
    tput = doc["throughput"]
    assert set(tput) >= {"iteration_ms", "tokens_per_s", "mfu"}
    assert tput["iteration_ms"] > 0 and tput["tokens_per_s"] > 0 and 0 < tput["mfu"] < 1
    assert tput["iteration_ms"] <= base["iteration_ms"] * (1 + 1e-9)
    assert doc["speedup"] == pytest.approx(base["iteration_ms"] / tput["iteration_ms"])


@pytest.fixture(scope="module")
def small_json(tmp_path_factory):
    folder = tmp_path_factory.mktemp("plan")
    proc = run_cli("plan", *SMALL, "--json", "--save-problem", str(folder / "p.json"), "--gantt", str(folder / "g.png"))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), folder


@pytest.mark.slow
def test_plan_json_is_result_v1_plus_baseline_and_throughput(small_json):
    doc, folder = small_json
    # the kept candidate is solved exactly with knobs per segment inside the solve: optimal over its m and schedule
    assert doc["method"] == "dp" and doc["status"] == "optimal" and doc["objective"] == "iteration"
    assert doc["bound"] is not None and doc["bound"] <= doc["value"] * (1 + 1e-12)
    assert doc["message"].startswith(f"optimal over its space at m={doc['microbatches']}, schedule ")
    check_result(doc, 8)
    assert doc["value"] <= doc["baseline"]["value"] * (1 + 1e-9)
    assert doc["simulation"]["fits_memory"] and doc["throughput"]["iteration_source"] == "simulator"
    assert doc["microbatches"] == 8 and doc["global_batch"] == 64 and doc["model"] == "llava-1.5-7b"
    # the saved problem (format v2: memory-knob variants) re-evaluates the plan to the same value
    problem = load_problem(folder / "p.json")
    assert evaluate(problem, Plan.from_dict(doc), "iteration").value == pytest.approx(doc["value"])
    assert run_cli("validate", str(folder / "p.json")).returncode == 0
    assert (folder / "g.png").stat().st_size > 1000


def test_mfu_matches_its_definition(small_json):
    doc, folder = small_json
    meta = load_problem(folder / "p.json").meta
    t = doc["throughput"]
    assert t["mfu"] == pytest.approx(meta["model_flops_per_iteration"] / (t["iteration_ms"] / 1e3 * 8 * meta["peak_flops_per_gpu"]))
    assert t["tokens_per_s"] == pytest.approx(64 * 2048 / (t["iteration_ms"] / 1e3))


@pytest.mark.slow
def test_export_of_a_plan_result(small_json, tmp_path):
    doc, _ = small_json
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    for target, marker in (("megatron", "--pipeline-model-parallel"), ("torchtitan", "module_fqns_per_model_part"), ("deepspeed", "PARTS")):
        proc = run_cli("export", str(path), "--to", target)
        assert proc.returncode == 0, proc.stderr
        assert marker in proc.stdout or "cannot express" in proc.stdout
        proc = run_cli("export", str(path), "--to", target, "--json")
        assert json.loads(proc.stdout)["target"] == target


@pytest.mark.slow
def test_plan_table_output():
    proc = run_cli("plan", *SMALL, "--method", "greedy")
    assert proc.returncode == 0, proc.stderr
    for text in ("dp x tp", "bottleneck stage", "speed-up", "MFU", "megatron", "torchtitan", "deepspeed"):
        assert text in proc.stdout


@pytest.mark.slow
def test_plan_bad_input_exits_2():
    proc = run_cli("plan", *SMALL[:-2], "--microbatches", "many")
    assert proc.returncode == 2 and "--microbatches" in proc.stderr
    proc = run_cli("plan", *SMALL[:-2], "--microbatches", "7")
    assert proc.returncode == 2 and "microbatches" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_cli("plan", *SMALL[:2], "--cluster", "tpu-v5", "--nodes", "1", "--global-batch", "8")
    assert proc.returncode == 2 and "tpu-v5" in proc.stderr
    proc = run_cli("plan", *SMALL, "--method", "magic")
    assert proc.returncode == 2 and "--method" in proc.stderr


def test_auto_microbatches_screens_every_divisor_and_keeps_the_fastest():
    r = plan_model("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=32, method="greedy")
    tried = r.extra["microbatches_tried"]
    assert [t["microbatches"] for t in tried] == [1, 2, 4, 8, 16, 32]
    solved = [t for t in tried if t["solved"] and t["iteration_ms"] is not None]
    assert r.extra["throughput"]["iteration_ms"] == pytest.approx(min(t["iteration_ms"] for t in solved))
    assert r.extra["microbatches"] == min(solved, key=lambda t: t["iteration_ms"])["microbatches"]
    assert r.problem is not None and r.problem.microbatches == r.extra["microbatches"]


def test_never_worse_than_the_baseline_even_if_the_method_is():
    @register("test-worse")
    def worse(problem, request):  # a valid plan, deliberately poor: everything on tp 8
        return Candidate("feasible", Plan((Stage(0, problem.num_layers - 1, 8, 1, 8),)))

    @register("test-none")
    def none(problem, request):
        return Candidate("error", message="gave up")

    try:
        r = plan_model("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=8, method="test-worse",
                       options={"zero1": True})
        problem = r.problem  # the baselines' problem (every knob), on which the kept plan lives
        bases = [b for b in (megatron_baseline(problem), fsdp_baseline(problem)) if b is not None]
        fastest = min(bases, key=lambda b: b[1].value)
        worst = evaluate(problem, Plan((Stage(0, problem.num_layers - 1, 8, 1, 8),)))
        assert worst.value > fastest[1].value
        assert r.value == pytest.approx(fastest[1].value) and r.status == "feasible"
        assert f"kept the {r.to_dict()['baseline']['method']} baseline" in r.message
        assert r.to_dict()["speedup"] == pytest.approx(1.0)
        r = plan_model("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=8, method="test-none")
        assert r.plan is not None and "gave up" in r.message and "kept" in r.message
    finally:
        for name in ("test-worse", "test-none"):
            solver_base._METHODS.pop(name, None)


@pytest.mark.slow
def test_infeasible_when_nothing_fits():
    r = plan_model("qwen2-vl-72b", "dgx-a100-80g", nodes=1, global_batch=8, microbatches=8, method="greedy")
    assert r.status == "infeasible" and r.plan is None and r.message
    proc = run_cli("plan", "--model", "qwen2-vl-72b", "--cluster", "dgx-a100-80g", "--nodes", "1", "--global-batch", "8",
                   "--microbatches", "8", "--method", "greedy", "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout)["status"] == "infeasible"


@pytest.mark.slow
@pytest.mark.parametrize(
    "model,cluster,nodes,batch",
    [("pi0", "dgx-h100", 2, 1024), ("openvla-7b", "dgx-a100-80g", 8, 2048)],
)
def test_acceptance_plans(model, cluster, nodes, batch):
    proc = run_cli(
        "plan", "--model", model, "--cluster", cluster, "--nodes", str(nodes), "--global-batch", str(batch), "--json"
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    check_result(doc, 8 * nodes)
    assert doc["simulation"]["fits_memory"]
    assert 0.2 <= doc["throughput"]["mfu"] <= 0.7
    assert doc["speedup"] >= 1.0


@pytest.mark.slow
def test_max_stages_and_cost_options_reach_the_problem(tmp_path):
    r = plan_model("seed-vla-8gpu", "dgx-h100", nodes=1, global_batch=32, microbatches=8, method="greedy", max_stages=2,
                   options={"recompute": "full"})
    # pipeline depth: the plan's stages, or its P·v chunks / v when plan kept interleaved 1F1B
    assert r.problem.stages.max == 2 and r.plan.num_stages // r.problem.training.virtual_stages <= 2
    assert r.problem.meta["options"]["recompute"] == "full"
    proc = run_cli("plan", "--model", "seed-vla-8gpu", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "32",
                   "--microbatches", "8", "--method", "greedy", "-c", "recompute=full", "-c", "freeze=vision", "--json",
                   "--save-problem", str(tmp_path / "p.yaml"))
    assert proc.returncode == 0, proc.stderr
    meta = load_problem(tmp_path / "p.yaml").meta
    assert meta["options"]["recompute"] == "full" and list(meta["options"]["freeze"]) == ["vision"]
    proc = run_cli("plan", "--model", "seed-vla-8gpu", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "32",
                   "--microbatches", "8", "--method", "greedy", "-c", "flash=1")
    assert proc.returncode == 2 and "unknown cost option 'flash'" in proc.stderr


def test_fsdp_baseline_and_per_stage_knobs():
    # pi0 on one node: FSDP (dp 8, ZeRO-3) is what it was trained with; the plan is never slower than it
    r = plan_model("pi0", "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    doc = r.to_dict()
    fsdp = doc["baselines"][FSDP_METHOD]
    assert fsdp["plan"] and len(fsdp["plan"]["stages"]) == 1
    stage = fsdp["plan"]["stages"][0]
    assert stage["dp"] == 8 and stage["tp"] == 1 and stage["variant"].startswith("zero3")
    assert doc["throughput"]["iteration_ms"] <= min(b["iteration_ms"] for b in doc["baselines"].values() if b["plan"]) * (1 + 1e-9)
    # every stage segment names its knobs, and they are the plan's configs
    assert [k["stage"] for k in doc["knobs"]] == list(range(len(doc["plan"]["stages"])))
    for knobs, st in zip(doc["knobs"], r.evaluation.stages):
        assert [(seg["dp"], seg["tp"]) for seg in knobs["segments"]] == [c.mesh for c in st.configs]
        for seg, c in zip(knobs["segments"], st.configs):
            assert c.variant == ("" if (seg["zero"], seg["recompute"]) == (0, "none") else c.variant)
            assert seg["zero"] in (0, 1, 3) and seg["recompute"] in ("none", "selective", "full")
    # the kept plan re-evaluates on its problem
    assert evaluate(r.problem, r.plan).value == pytest.approx(r.value)
