"""``plan --baseline RECIPE``: the user's recipe as the one reference of the speed-up, never faster than the plan."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from partitioner import Recipe
from partitioner.costs import CostOptions, ProblemBuilder
from partitioner.planning import PlanOptions, plan_model
from partitioner.planning.recipes.baseline import (
    estimate_baseline,
    keep_faster,
    read_baseline,
    recipe_solve,
    with_recipe_axes,
)
from partitioner.planning.run import plan_options
from partitioner.presets import load_cluster, load_model
from partitioner.presets.recipes import published_recipe, published_recipes
from partitioner.problem import ProblemError

CLUSTER = "dgx-h100"
LAUNCH = """torchrun --nnodes 1 --nproc-per-node 8 pretrain_vlm.py \\
  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 \\
  --micro-batch-size 1 --global-batch-size 32 --use-distributed-optimizer
"""

# (model, nodes, global batch, recipe): a dense VLM, a dense VLM with recompute, a MoE VLM with expert parallelism
CASES = [
    ("qwen2-vl-7b", 1, 32, Recipe(tp=2, pp=2, mbs=1, zero=1)),
    ("llava-1.5-7b", 1, 64, Recipe(tp=1, pp=4, mbs=2, zero=1, recompute="full")),
    ("qwen3-vl-30b-a3b", 2, 64, Recipe(tp=2, pp=2, ep=4, mbs=1, zero=1)),
]


@pytest.fixture(scope="module", params=CASES, ids=[c[0] for c in CASES])
def planned(request):
    model, nodes, gbs, recipe = request.param
    return plan_model(model, CLUSTER, nodes=nodes, global_batch=gbs, baseline=recipe, time_limit=30), request.param


def test_plan_never_slower_than_the_recipe(planned):
    r, (model, nodes, gbs, recipe) = planned
    rb = r.recipe_baseline
    assert rb is not None and rb.fits and r.throughput is not None
    assert r.throughput.iteration_ms <= rb.iteration_ms * (1 + 1e-12)
    assert r.speedup == pytest.approx(rb.iteration_ms / r.throughput.iteration_ms, rel=1e-12)
    assert rb.speedup == r.speedup  # one stated reference
    assert (rb.recipe["tp"], rb.recipe["pp"], rb.recipe["ep"], rb.recipe["gbs"]) == (recipe.tp, recipe.pp, recipe.ep, gbs)
    doc = r.to_dict()
    assert doc["recipe_baseline"]["iteration_ms"] == rb.iteration_ms and doc["speedup"] == r.speedup
    json.dumps(doc)  # the section is JSON


def test_the_recipe_equals_its_estimate(planned):
    """The recipe's iteration in the plan is what ``estimate`` reports on the same job (the same cost model)."""
    from partitioner import estimate

    r, (model, nodes, gbs, recipe) = planned
    est = estimate(model, CLUSTER, replace(recipe, gbs=gbs), nodes=nodes)
    assert r.recipe_baseline is not None
    assert r.recipe_baseline.iteration_ms == pytest.approx(est.iteration_ms, rel=1e-12)


def test_time_limited_plan_keeps_the_recipe_when_faster():
    """A solve cut short returns at least the recipe: the kept plan's iteration <= the recipe's."""
    recipe = Recipe(tp=2, pp=2, ep=4, mbs=1, zero=1)
    r = plan_model("qwen3-vl-30b-a3b", CLUSTER, nodes=2, global_batch=64, baseline=recipe, time_limit=0.5)
    assert r.plan is not None and r.recipe_baseline is not None
    assert r.throughput is not None and r.throughput.iteration_ms <= r.recipe_baseline.iteration_ms * (1 + 1e-12)


def _job(model: str, nodes: int, gbs: int, recipe: Recipe):
    spec, cl = load_model(model), load_cluster(CLUSTER)
    opts = PlanOptions(nodes=nodes, global_batch=gbs)
    return spec, cl, opts, estimate_baseline(read_baseline(recipe, spec, cl, opts, plan_options(None)), spec, cl, opts)


def test_keep_faster_keeps_the_recipe_over_a_slower_plan():
    spec, cl, opts, base = _job("qwen2-vl-7b", 1, 32, Recipe(tp=2, pp=2, zero=1))
    own = recipe_solve(base, "dp", "iteration", 0.0)
    assert own is not None
    slower = replace(own, iteration_ms=own.iteration_ms * 1.5)  # a solver's plan slower than the recipe
    kept, note = keep_faster(slower, base, "dp", "iteration")
    assert kept is not None and kept.iteration_ms == own.iteration_ms and note and "kept the recipe's plan" in note
    faster = replace(own, iteration_ms=own.iteration_ms * 0.5)
    assert keep_faster(faster, base, "dp", "iteration") == (faster, None)
    refused = keep_faster(slower, base, "dp", "iteration", admits=lambda problem, plan: ["not on this target"])
    assert refused == (slower, None)  # a target that does not run the recipe's plan keeps the solver's


def test_plan_problem_offers_the_recipe_keys():
    """ep 16 is beyond a node's default ep degrees, cp 2 below the default cp sequence: both are offered."""
    recipe = Recipe(tp=1, pp=1, cp=2, ep=16, etp=1)
    costs = with_recipe_axes(plan_options(None), recipe, 8)
    doc = costs.to_dict()
    assert 16 in doc["ep_degrees"] and 8 in doc["ep_degrees"] and 2 in doc["cp_degrees"] and doc["cp_min_tokens"] == 1
    listed = with_recipe_axes(CostOptions.from_mapping({"variants": ["zero1"]}), Recipe(zero=1, recompute="full"), 8)
    assert "zero1+recompute-full" in listed.to_dict()["variants"]
    # the recipe's plan's keys are in the problem the plan solves
    spec, cl, opts, base = _job("qwen3-vl-30b-a3b", 2, 64, Recipe(tp=2, pp=2, ep=4, zero=1))
    widened = with_recipe_axes(plan_options(None), base.estimate.recipe, cl.gpus_per_node)
    problem = ProblemBuilder(spec, cl, nodes=2, options=widened).build(64, base.estimate.microbatches)
    est = base.estimate
    assert est.evaluation is not None and est.plan is not None
    for stage in est.evaluation.stages:
        segments = stage.segments or ((stage.first_layer, stage.last_layer),)
        for (first, last), config in zip(segments, stage.configs or (stage.layout,)):
            assert all(problem.layers[i].costs.get(config) is not None for i in range(first, last + 1)), config


@pytest.mark.parametrize("recipe, field, words", [
    (Recipe(tp=2, nodes=2), "--nodes", "2 nodes"),
    (Recipe(tp=2, gbs=64), "--gbs", "global batch is 64"),
    (Recipe(tp=2, precision="fp8"), "--precision", "fp8"),
])
def test_a_recipe_of_another_job_is_refused(recipe, field, words):
    with pytest.raises(ProblemError) as info:
        plan_model("qwen2-vl-7b", CLUSTER, nodes=1, global_batch=32, baseline=recipe)
    assert info.value.path == field and words in str(info.value)


def test_bad_baseline_value_is_refused():
    with pytest.raises(ProblemError) as info:
        PlanOptions(nodes=1, global_batch=32, baseline=3)
    assert info.value.path == "baseline"


def test_cli_baseline_file(cli, tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text(LAUNCH)
    run = cli("plan", "--model", "qwen2-vl-7b", "--cluster", CLUSTER, "--nodes", "1", "--global-batch", "32",
              "--baseline", path, "--time-limit", "30")
    assert run.returncode == 0, run.stderr
    text = " ".join(run.stdout.split())  # the console wraps long lines
    line = text[text.index("baseline: your recipe"):][:400]
    assert str(path) in line and "tp 2 x pp 2 x dp 2" in line and "iteration" in line and "speed-up" in line
    doc = json.loads(cli("plan", "--model", "qwen2-vl-7b", "--cluster", CLUSTER, "--nodes", "1", "--global-batch",
                         "32", "--baseline", path, "--time-limit", "30", "--json").stdout)
    assert doc["recipe_baseline"]["name"] == f"your recipe {path}" and doc["speedup"] == doc["recipe_baseline"]["speedup"]


def test_cli_recipe_of_another_job_exits_2(cli, tmp_path):
    path = tmp_path / "launch.sh"
    path.write_text(LAUNCH)
    run = cli("plan", "--model", "qwen2-vl-7b", "--cluster", CLUSTER, "--nodes", "2", "--global-batch", "32",
              "--baseline", path)
    assert run.returncode == 2 and "--nnodes" in run.stderr and "Traceback" not in run.stderr
    run = cli("plan", "--model", "qwen2-vl-7b", "--cluster", CLUSTER, "--nodes", "1", "--global-batch", "64",
              "--baseline", path)
    assert run.returncode == 2 and "--global-batch-size" in run.stderr
    run = cli("plan", "--model", "qwen2-vl-7b", "--cluster", CLUSTER, "--nodes", "1", "--global-batch", "32",
              "--baseline", tmp_path / "missing.sh")
    assert run.returncode == 2 and "missing.sh" in run.stderr and "Traceback" not in run.stderr


# --------------------------------------------------------------------------- the published recipes shipped


def test_every_shipped_recipe_names_its_source_and_reads():
    shipped = published_recipes()
    assert 2 <= len(shipped) <= 4
    for r in shipped:
        assert r.url.startswith("https://") and r.states
        recipe = Recipe.from_fields(r.fields)
        spec, cl = load_model(r.model), load_cluster(r.cluster)
        opts = PlanOptions(nodes=r.nodes, global_batch=recipe.gbs or 1)
        base = estimate_baseline(read_baseline(recipe, spec, cl, opts, plan_options(None)), spec, cl, opts)
        assert base.iteration_ms > 0


def test_published_without_a_shipped_recipe_lists_what_is_shipped():
    with pytest.raises(ProblemError) as info:
        published_recipe("llava-1.5-7b", CLUSTER, 1)
    assert info.value.path == "--baseline" and "shipped:" in str(info.value)
    first = published_recipes()[0]
    assert first.label() in str(info.value)


def test_cli_baseline_published(cli):
    """The preset's shipped recipe on its own job: the line names it and its source; the JSON carries the URL."""
    run = cli("plan", "--model", "qwen3-vl-30b-a3b", "--cluster", CLUSTER, "--nodes", "1", "--global-batch", "32",
              "--baseline", "published", "--time-limit", "10", "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)["recipe_baseline"]
    assert doc["name"].startswith("the published recipe Megatron-Bridge qwen3_vl_30b_a3b_sft_8gpu_h100_bf16_config")
    assert doc["source"].startswith("https://github.com/NVIDIA-NeMo/Megatron-Bridge/")
    assert (doc["recipe"]["ep"], doc["recipe"]["mbs"], doc["recipe"]["gbs"]) == (8, 2, 32)
    run = cli("plan", "--model", "qwen3-vl-30b-a3b", "--cluster", CLUSTER, "--nodes", "2", "--global-batch", "32",
              "--baseline", "published")
    assert run.returncode == 2 and "--baseline" in run.stderr and "shipped:" in run.stderr


# --------------------------------------------------------------------------- the shipped recipes against memory

GIB = 2**30


def _shipped_estimate(model: str):
    from partitioner import estimate

    found = published_recipes(model)
    assert len(found) == 1
    r = found[0]
    return r, estimate(r.model, r.cluster, Recipe.from_fields(r.fields), nodes=r.nodes)


@pytest.mark.slow
def test_glm_45v_published_recipe_fits_and_the_plan_is_no_slower():
    """Megatron-Bridge's GLM-4.5V SFT on 128 H100 (pp 8, ep 16, edp 1, no recompute, 4 microbatches in flight on
    ranks 0-4) fits under estimate, and ``plan --baseline published`` returns a plan no slower than it."""
    r, est = _shipped_estimate("glm-4.5v")
    assert est.fits, est.over_memory
    assert max(s.memory_bytes for s in est.stages) <= est.gpu_memory_bytes
    planned = plan_model(r.model, r.cluster, nodes=r.nodes, global_batch=Recipe.from_fields(r.fields).gbs,
                         baseline="published", time_limit=20)
    rb = planned.recipe_baseline
    assert rb is not None and rb.fits and planned.throughput is not None
    assert planned.throughput.iteration_ms <= rb.iteration_ms * (1 + 1e-12)


def test_qwen3_vl_30b_published_recipe_is_over_memory_by_its_weights_alone():
    """Megatron-Bridge's Qwen3-VL-30B-A3B SFT on 8 H100 (tp 1, pp 1, ep 8, so edp = 8 / 8 = 1) keeps, per GPU,
    every routed parameter of its 16 experts x 48 layers at 2 (bf16) + 4 (fp32 main_grad) + 12 (fp32 master, Adam
    m, v; the distributed optimizer shards them over edp 1: not at all) = 18 B, and the dense parameters at
    6 + 12 / dp: 75.3 GiB before any activation, above the 73.8 GiB the cost model lets a GPU use (79.6 GiB less
    the CUDA/NCCL reserve and fragmentation). No memory term can make it fit without leaving Megatron-Core's own
    buffers out: the recipe stays over memory."""
    from partitioner.costs.layers import model_layers

    r, est = _shipped_estimate("qwen3-vl-30b-a3b")
    spec = load_model(r.model)
    llm = next(m for m in spec.modules if m.kind == "llm")
    routed = llm.layers * llm.experts * 3 * llm.hidden * llm.moe_ffn  # gated experts: gate, up, down
    dense = sum(p.params for layer in model_layers(spec) for p in layer.pieces) - routed
    closed = routed / 8 * 18 + dense * (6 + 12 / 8)
    assert est.evaluation is not None and len(est.evaluation.stages) == 1
    weights = est.evaluation.stages[0].weight_bytes
    assert weights == pytest.approx(closed, rel=1e-3)
    assert weights / GIB == pytest.approx(75.3, abs=0.05)
    assert weights > est.gpu_memory_bytes and not est.fits
