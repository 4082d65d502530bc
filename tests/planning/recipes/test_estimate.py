"""``estimate``: a stated layout as a plan of the planner's problem, and the recipe readers.

The round trip is the contract: the plan ``plan --target megatron`` finds,
exported as Megatron-LM flags and read back by the argument-list reader,
gives the iteration time, cuts and stage figures ``plan`` reported; and any
stated layout, exported to Megatron-LM or DeepSpeed and read back by that
target's reader, estimates as the same plan (or the exporter refuses it).
"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitioner import Recipe, estimate
from partitioner.frameworks.export import export_result
from partitioner.frameworks.megatron.recipe import read_bridge_config, read_megatron_args
from partitioner.frameworks.torchtitan.recipe import read_torchtitan_overrides, read_torchtitan_toml
from partitioner.planning import plan_model
from partitioner.planning.recipes.estimate import layout_cuts
from partitioner.problem import ProblemError
from strategies import examples
from tests.planning.recipes.round_trip import ROUND_TRIP_TARGETS, round_trip

MODEL, CLUSTER = "llava-1.5-13b", "dgx-a100-80g"  # 40 decoder layers, 40 heads; 13B does not fit on one A100 unsharded


@pytest.fixture(scope="module", params=["1f1b", "interleaved"])
def megatron_plan(request):
    """``plan --target megatron`` on one node, tp held to 1 so the plan pipelines (pp 2; interleaved: v chunks each)."""
    return plan_model(MODEL, CLUSTER, nodes=1, global_batch=64, microbatches=16, target="megatron",
                      schedule=request.param, options={"max_tp": 1})


def test_round_trip_export_then_estimate(megatron_plan):
    r = megatron_plan
    exported = export_result(r, "megatron", r.problem)
    assert exported.expressible, exported.reasons
    recipe = read_megatron_args(exported.text(), "export")
    v = r.problem.training.virtual_stages if r.problem.training.schedule == "interleaved" else 1
    assert recipe.pp * v == len(r.plan.stages) and recipe.pp >= 2  # the case is a pipeline, not a single stage
    est = estimate(MODEL, CLUSTER, recipe, nodes=1, options={"max_tp": 1})
    assert est.fits and (est.schedule, est.virtual_stages) == (r.problem.training.schedule, v)
    assert est.iteration_ms == pytest.approx(r.throughput.iteration_ms, rel=1e-9)
    assert est.throughput.mfu == pytest.approx(r.throughput.mfu, rel=1e-9)
    planned = [(s.first_layer, s.last_layer, s.fwd_ms, s.bwd_ms, s.memory_bytes) for s in r.evaluation.stages]
    estimated = [(s.first_layer, s.last_layer, s.fwd_ms, s.bwd_ms, s.memory_bytes) for s in est.evaluation.stages]
    assert [e[:2] for e in estimated] == [p[:2] for p in planned]
    assert [x for e in estimated for x in e[2:]] == pytest.approx([x for p in planned for x in p[2:]], rel=1e-12)


def test_round_trip_stated_as_flags(megatron_plan, cli):
    """The same layout typed as flags on the command line: the same iteration time, exit 0."""
    r = megatron_plan
    if r.problem.training.schedule != "1f1b":
        pytest.skip("one schedule is enough for the command line")
    layout = export_result(r, "megatron", r.problem).settings["transformer_config"]["pipeline_model_parallel_layout"]
    run = cli("estimate", "--model", MODEL, "--cluster", CLUSTER, "--nodes", "1", "--gbs", "64", "--mbs", "1",
              "--tp", "1", "--pp", "2", "--pipeline-model-parallel-layout", layout, "--distributed-optimizer",
              "--no-sequence-parallel", "-c", "max_tp=1", "--json")
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["fits"] is True and doc["microbatches"] == 16
    assert doc["iteration_ms"] == pytest.approx(r.throughput.iteration_ms, rel=1e-9)


def test_default_split_is_megatrons_uniform():
    """Without a layout: the vision encoder and embedding with the first decoder layers, 20 + 20 decoders."""
    est = estimate(MODEL, CLUSTER, Recipe(pp=2, gbs=64, zero=1), nodes=1)
    names = [est.problem.layers[s.last_layer].name for s in est.evaluation.stages]
    assert names == ["llm.19", "llm.head"]
    assert est.dp == 4 and est.microbatches == 16 and est.schedule == "1f1b"


@pytest.mark.parametrize(("flags", "option", "words"), [
    (["--tp", "8"], "--tp", "does not divide 28"),  # Qwen2-VL-7B's 28 heads
    (["--pp", "3"], "--pp", "does not divide the world"),
    (["--tp", "2", "--pp", "2", "--dp", "4"], "--dp", "disagrees"),
    (["--gbs", "60"], "--gbs", "not a multiple"),
    (["--ep", "2"], "--ep", "no routed experts"),
    (["--zero", "2"], "--zero", "must be one of"),
    (["--pp", "2", "--vpp", "2", "--gbs", "12", "--mbs", "1"], "--gbs", "not a multiple of 2"),
])
def test_bad_layout_exits_2_naming_the_option(cli, flags, option, words):
    args = ["--gbs", "64", *flags] if "--gbs" not in flags else flags
    run = cli("estimate", "--model", "qwen2-vl-7b", "--cluster", "dgx-h100", "--nodes", "1", *args)
    assert run.returncode == 2, (run.stdout, run.stderr)
    line = run.stderr.strip()
    assert line.startswith(f"error: {option}:") and words in line, line
    assert "Traceback" not in run.stderr


def test_over_memory_is_reported_not_refused(cli):
    """13B unsharded on one A100 per replica: reported as not fitting (exit 1), with the rank and the excess."""
    est = estimate(MODEL, CLUSTER, Recipe(gbs=64), nodes=1)
    assert not est.fits and est.over_memory and est.over_memory[0].startswith("pipeline rank 0:")
    assert not est.stages[0].fits and est.stages[0].memory_bytes > est.gpu_memory_bytes
    assert est.iteration_ms > 0 and est.throughput.mfu > 0  # timed with the memory check lifted
    run = cli("estimate", "--model", MODEL, "--cluster", CLUSTER, "--nodes", "1", "--gbs", "64", "--json")
    assert run.returncode == 1, run.stderr
    doc = json.loads(run.stdout)
    assert doc["fits"] is False and doc["stages"][0]["fits"] is False
    text = cli("estimate", "--model", MODEL, "--cluster", CLUSTER, "--nodes", "1", "--gbs", "64")
    assert text.returncode == 1 and "DOES NOT FIT: pipeline rank 0" in text.stdout


LAUNCH = r"""#!/bin/bash
# Qwen3-VL-30B-A3B on 2 nodes (a launch script as users keep them)
export CUDA_DEVICE_MAX_CONNECTIONS=1
DISTRIBUTED_ARGS=(--nproc_per_node 8 --nnodes 2 --node_rank $NODE_RANK --master_addr $MASTER_ADDR)
MODEL_PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 2   # two pipeline ranks
    --expert-model-parallel-size=4
    --expert-tensor-parallel-size 1
    --sequence-parallel
    --use-distributed-optimizer
)
torchrun ${DISTRIBUTED_ARGS[@]} pretrain_vlm.py ${MODEL_PARALLEL_ARGS[@]} \
    --num-layers 48 --hidden-size 2048 --seq-length 4096 \
    --micro-batch-size 1 --global-batch-size 64 \
    --recompute-granularity selective --recompute-modules moe_act layernorm \
    --moe-grouped-gemm --lr 1e-4 --bf16 \
    --data-path $DATA --save $CKPT
"""


def test_megatron_reader_parses_a_launch_script():
    r = read_megatron_args(LAUNCH, "launch.sh")
    assert (r.tp, r.pp, r.ep, r.etp, r.mbs, r.gbs, r.num_layers) == (2, 2, 4, 1, 1, 64, 48)
    assert r.zero == 1 and r.recompute == "layernorm+moe_act" and r.sequence_parallel is True
    assert r.vpp == 1 and r.cp == 1 and r.pipeline_layout is None
    assert r.where("ep") == "launch.sh: --expert-model-parallel-size"
    est = estimate("qwen3-vl-30b-a3b", "dgx-h100", r, nodes=2)
    assert est.dp == 4 and est.microbatches == 16
    assert any("ep4" in c for s in est.stages for c in s.configs)  # the experts split as stated
    assert all(c.endswith("/zero1+recompute-layernorm+moe_act") for s in est.stages for c in s.configs)


@pytest.mark.parametrize(("text", "flag"), [
    ("--tensor-model-parallel-size $TP", "--tensor-model-parallel-size"),
    ("--recompute-granularity full --recompute-method block --recompute-num-layers 2", "--recompute-method"),
    ("--account-for-embedding-in-pipeline-split", "--account-for-embedding-in-pipeline-split"),
    ("--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", "--data-parallel-sharding-strategy"),
    ("--recompute-modules mlp", "--recompute-modules"),
])
def test_megatron_reader_refuses_what_it_cannot_price(text, flag):
    with pytest.raises(ProblemError) as info:
        read_megatron_args(text, "run.sh")
    assert str(info.value).startswith(f"run.sh: {flag}:")


def test_megatron_reader_defaults():
    r = read_megatron_args("--tensor-model-parallel-size 4 --recompute-activations --fp8-format hybrid "
                           "--num-layers-per-virtual-pipeline-stage 2 --num-layers 16 --pipeline-model-parallel-size 2")
    assert r.expert_tp == 4 and r.recompute == "selective" and r.sequence_parallel is False
    assert (r.precision, r.fp8_recipe, r.vpp) == ("fp8", "delayed", 4)


def test_torchtitan_reader():
    r = read_torchtitan_toml("""
[training]
local_batch_size = 8
global_batch_size = 128
[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 2
pipeline_parallel_degree = 2
pipeline_parallel_microbatch_size = 2
[activation_checkpoint]
mode = "full"
""", "job.toml")
    assert (r.tp, r.pp, r.mbs, r.gbs, r.zero, r.recompute, r.dp, r.memory_count) == (2, 2, 2, 128, 3, "full", None, "fsdp2")
    assert r.expert_tp == 1 and r.where("mbs") == "job.toml: parallelism.pipeline_parallel_microbatch_size"
    with pytest.raises(ProblemError, match="pipeline_parallel_schedule"):
        read_torchtitan_toml('[parallelism]\npipeline_parallel_degree = 2\npipeline_parallel_schedule = "ZBVZeroBubble"')


def test_layout_cuts_keep_the_vision_encoder_with_the_embedding():
    est = estimate(MODEL, CLUSTER, Recipe(pp=2, gbs=64, zero=1, pipeline_layout="Et*12|t*28L"), nodes=1)
    problem = est.problem
    cuts = layout_cuts(problem, "Et*12|t*28L", 2, "--pipeline-model-parallel-layout")
    assert cuts == [(s.first_layer, s.last_layer) for s in est.evaluation.stages]
    assert problem.layers[cuts[0][0]].name == "vision.0" and problem.layers[cuts[0][1]].name == "llm.11"
    with pytest.raises(ProblemError, match="holds no layer"):
        layout_cuts(problem, "Et*40||L", 3, "layout")


def test_interleaved_recipe():
    est = estimate(MODEL, CLUSTER, Recipe(pp=2, vpp=2, gbs=64, zero=1), nodes=1)
    assert est.schedule == "interleaved" and est.virtual_stages == 2 and len(est.stages) == 4
    assert [s.rank for s in est.stages] == [0, 1, 0, 1]
    assert est.stages[0].memory_bytes == est.stages[2].memory_bytes  # a rank's memory holds both its chunks


def test_pp1_layout_runs_unpipelined():
    """Megatron-Core runs no pipeline schedule at pp 1: a two-stage layout is one stage, and the estimate says so."""
    one = estimate(MODEL, CLUSTER, Recipe(gbs=64, zero=1, tp=8), nodes=1)
    two = estimate(MODEL, CLUSTER, Recipe(gbs=64, zero=1, tp=8, pipeline_layout="Et*20|t*20L"), nodes=1)
    assert two.iteration_ms == one.iteration_ms and len(two.stages) == 1
    assert any("no pipeline schedule" in n for n in two.notes)


def test_recipe_file_with_flag_override(cli, tmp_path):
    path = tmp_path / "run.sh"
    path.write_text("--tensor-model-parallel-size 2 --pipeline-model-parallel-size 4 --micro-batch-size 1 "
                    "--global-batch-size 64 --use-distributed-optimizer --sequence-parallel\n")
    run = cli("estimate", "--model", MODEL, "--cluster", CLUSTER, "--nodes", "1", "--recipe", path, "--pp", "2",
              "--json", "--gantt", tmp_path / "g.png")
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "g.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(run.stdout)
    assert (doc["recipe"]["tp"], doc["recipe"]["pp"], doc["dp"]) == (2, 2, 2)
    bad = cli("estimate", "--model", MODEL, "--cluster", CLUSTER, "--nodes", "1", "--recipe", path, "--tp", "3")
    assert bad.returncode == 2 and bad.stderr.startswith("error: --tp:")
    path.write_text("--tensor-model-parallel-size 3 --global-batch-size 64\n")
    bad = cli("estimate", "--model", MODEL, "--cluster", CLUSTER, "--nodes", "1", "--recipe", path)
    assert bad.returncode == 2 and f"{path}: --tensor-model-parallel-size" in bad.stderr


@st.composite
def _recipes(draw):
    """Random Megatron layouts of llava-1.5-7b (32 decoder layers, 32 heads) on 2 nodes of 8 GPUs."""
    tp = draw(st.sampled_from([1, 2, 4, 8]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4, 8, 16) if 16 % (tp * p) == 0 and 32 % p == 0]))
    vpp = draw(st.sampled_from([v for v in (1, 2, 4) if v == 1 or (pp >= 2 and 32 % (pp * v) == 0)]))
    dp = 16 // (tp * pp)
    mbs = draw(st.sampled_from([1, 2]))
    gbs = mbs * dp * pp * draw(st.integers(1, 4))
    zero = draw(st.sampled_from([0, 1, 3]))
    recompute = draw(st.sampled_from(["none", "selective", "full", "op"]))
    layout = None
    if pp > 1 and vpp == 1 and draw(st.booleans()):  # an uneven split, stated as a layout
        first = draw(st.integers(1, 32 - (pp - 1)))
        rest = [32 - first - (pp - 2) * ((32 - first) // (pp - 1))] + [(32 - first) // (pp - 1)] * (pp - 2)
        if all(n >= 1 for n in rest):
            counts = [first, *rest]
            layout = "|".join(("E" if i == 0 else "") + f"t*{n}" + ("L" if i == pp - 1 else "")
                              for i, n in enumerate(counts))
    return Recipe(tp=tp, pp=pp, vpp=vpp, mbs=mbs, gbs=gbs, zero=zero, recompute=recompute, pipeline_layout=layout)


@st.composite
def _moe_recipes(draw):
    """Random 1F1B layouts of qwen3-vl-30b-a3b (48 layers, 128 experts, 4 KV heads) on 2 nodes of 8 H100, with
    ep and etp (ep x etp divides dp x tp, Megatron's expert folding)."""
    tp = draw(st.sampled_from([1, 2, 4]))
    pp = draw(st.sampled_from([p for p in (1, 2, 4) if 16 % (tp * p) == 0]))
    dp = 16 // (tp * pp)
    etp = draw(st.sampled_from(sorted({1, tp})))
    ep = draw(st.sampled_from([e for e in (1, 2, 4, 8) if (dp * tp) % (e * etp) == 0]))
    gbs = dp * pp * draw(st.integers(1, 2))
    zero = draw(st.sampled_from([0, 1, 3]))
    recompute = draw(st.sampled_from(["none", "selective", "full", "op"]))
    return Recipe(tp=tp, pp=pp, ep=ep, etp=etp if ep > 1 else None, mbs=1, gbs=gbs, zero=zero, recompute=recompute)


@settings(max_examples=examples(12), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(recipe=_recipes(), target=st.sampled_from(ROUND_TRIP_TARGETS))
def test_estimate_export_estimate_is_the_same_plan(recipe, target, tmp_path):
    """estimate, export its plan to a target, read the file back with that target's reader, estimate: the same
    stages, configs, schedule, microbatches, times and memory -- or the exporter refuses what the target cannot run."""
    round_trip("llava-1.5-7b", recipe, target, tmp_path)


@settings(max_examples=examples(8), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(recipe=_moe_recipes(), target=st.sampled_from(ROUND_TRIP_TARGETS))
def test_moe_round_trip_every_target(recipe, target, tmp_path):
    """The round trip on a MoE VLM with ep and etp (Megatron's export is a Bridge launch for this preset)."""
    round_trip("qwen3-vl-30b-a3b", recipe, target, tmp_path)


def test_uneven_split_flags_equal_their_layout(cli):
    """``--decoder-first/last-pipeline-num-layers`` cut as the layout that lists the same stages."""
    uneven = read_megatron_args("--pipeline-model-parallel-size 4 --num-layers 40 --global-batch-size 64 "
                                "--decoder-first-pipeline-num-layers 7 --decoder-last-pipeline-num-layers 9 "
                                "--use-distributed-optimizer")
    by_flags = estimate(MODEL, CLUSTER, uneven, nodes=1)
    by_layout = estimate(MODEL, CLUSTER, Recipe(pp=4, gbs=64, zero=1, sequence_parallel=False,
                                                pipeline_layout="Et*7|t*12|t*12|t*9L"), nodes=1)
    assert [(s.first_layer, s.last_layer) for s in by_flags.stages] == \
        [(s.first_layer, s.last_layer) for s in by_layout.stages]
    assert by_flags.iteration_ms == by_layout.iteration_ms
    run = cli("estimate", "--model", MODEL, "--cluster", CLUSTER, "--nodes", "1", "--gbs", "64", "--pp", "4",
              "--decoder-first-pipeline-num-layers", "7", "--decoder-last-pipeline-num-layers", "8")
    assert run.returncode == 2 and run.stderr.startswith("error: --decoder-first-pipeline-num-layers:"), run.stderr


BRIDGE_YAML = """
model:
  tensor_model_parallel_size: 2
  pipeline_model_parallel_size: 2
  expert_model_parallel_size: 4
  expert_tensor_parallel_size: null
  sequence_parallel: true
  recompute_granularity: selective
  recompute_modules: [moe_act, layernorm]
train:
  global_batch_size: 64
  micro_batch_size: 1
ddp:
  use_distributed_optimizer: true
mixed_precision: bf16_with_fp8_current_scaling_mixed
"""

BRIDGE_PY = """
def qwen3_vl_pretrain_config():
    cfg = base_config()
    cfg.model.tensor_model_parallel_size = 2
    cfg.model.pipeline_model_parallel_size = 2  # two pipeline ranks
    cfg.model.expert_model_parallel_size = 4
    cfg.model.sequence_parallel = True
    cfg.model.recompute_granularity = "selective"
    cfg.model.recompute_modules = ["moe_act", "layernorm"]
    cfg.train.global_batch_size = 64
    cfg.ddp.use_distributed_optimizer = True
    cfg.mixed_precision = "bf16_with_fp8_current_scaling_mixed"
    return cfg
"""


def test_bridge_reader_yaml_python_and_hydra_agree():
    want = (2, 2, 4, None, 1, 64, 1, "layernorm+moe_act", True, "fp8", "tensorwise")
    hydra = ("python pretrain.py model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=2 "
             "model.expert_model_parallel_size=4 model.sequence_parallel=true model.recompute_granularity=selective "
             "model.recompute_modules=[moe_act,layernorm] train.global_batch_size=64 "
             "ddp.use_distributed_optimizer=true mixed_precision=bf16_with_fp8_current_scaling_mixed")
    for text in (BRIDGE_YAML, BRIDGE_PY, hydra):
        r = read_bridge_config(text, "cfg")
        assert (r.tp, r.pp, r.ep, r.etp, r.mbs, r.gbs, r.zero, r.recompute, r.sequence_parallel, r.precision,
                r.fp8_recipe) == want
        assert r.where("ep") == "cfg: model.expert_model_parallel_size"
    with pytest.raises(ProblemError) as info:
        read_bridge_config("model.pipeline_model_parallel_size=$PP", "run.sh")
    assert str(info.value).startswith("run.sh: model.pipeline_model_parallel_size:")


def test_recipe_format_auto(cli, tmp_path):
    for name, text in (("cfg.yaml", BRIDGE_YAML), ("recipe.py", BRIDGE_PY)):
        path = tmp_path / name
        path.write_text(text)
        run = cli("estimate", "--model", "qwen3-vl-30b-a3b", "--cluster", "dgx-h100", "--nodes", "2", "--recipe", path,
                  "--json")
        assert run.returncode == 0, run.stderr
        doc = json.loads(run.stdout)
        assert (doc["recipe"]["tp"], doc["recipe"]["ep"], doc["recipe"]["precision"], doc["dp"]) == (2, 4, "fp8", 4)
    hydra = tmp_path / "run.sh"
    hydra.write_text("python pretrain.py \\\n  model.tensor_model_parallel_size=2 train.global_batch_size=64\n")
    run = cli("estimate", "--model", MODEL, "--cluster", CLUSTER, "--nodes", "1", "--recipe", hydra, "--json")
    assert run.returncode in (0, 1), run.stderr
    assert json.loads(run.stdout)["recipe"]["tp"] == 2


def test_torchtitan_recipe_charges_torchtitans_count():
    """FSDP2 keeps 16 B per parameter sharded (Megatron's ZeRO-3 count 18): the weights charged fall by 16/18,
    and ``-c memory_count`` still wins over the recipe's."""
    toml = "[training]\nglobal_batch_size = 64\nlocal_batch_size = 8\n[parallelism]\ntensor_parallel_degree = 2\n"
    r = read_torchtitan_toml(toml, "job.toml")
    assert (r.zero, r.memory_count) == (3, "fsdp2")
    titan = estimate(MODEL, "dgx-h100", r, nodes=1)
    megatron = estimate(MODEL, "dgx-h100", r, nodes=1, options={"memory_count": "megatron"})
    w_titan, w_megatron = titan.evaluation.stages[0].weight_bytes, megatron.evaluation.stages[0].weight_bytes
    assert w_titan < w_megatron
    assert titan.iteration_ms == megatron.iteration_ms  # the count is memory only
    kept = read_torchtitan_toml(toml.replace("tensor_parallel_degree", 'fsdp_reshard_after_forward = "never"\n'
                                                                        "tensor_parallel_degree"), "job.toml")
    assert (kept.zero, kept.memory_count) == (1, "fsdp2-keep-gathered")


def test_cp_comm_type_is_the_cost_models_cp_algorithm():
    r = read_megatron_args("--context-parallel-size 2 --tensor-model-parallel-size 2 --global-batch-size 64 "
                           "--cp-comm-type a2a")
    assert r.cp_algorithm == "a2a"
    a2a = estimate("qwen2-vl-7b", "dgx-h100", r, nodes=1)
    ring = estimate("qwen2-vl-7b", "dgx-h100", replace(r, cp_algorithm="p2p"), nodes=1)
    assert a2a.iteration_ms != ring.iteration_ms  # the algorithm reaches the cost entries
    assert read_bridge_config("model.cp_comm_type=allgather", "cfg").cp_algorithm == "all_gather"
    with pytest.raises(ProblemError, match="--cp-comm-type"):
        read_megatron_args("--cp-comm-type a2a+p2p", "run.sh")


def test_torchtitan_recipe_charges_unfused_expert_activations():
    """torchtitan's GroupedExperts keep 4f per routed token copy (Megatron's fused SwiGLU 3f): a torchtitan
    recipe charges more activation memory than the same layout with ``-c expert_fused_glu=true``, and the
    user's option wins over the recipe's."""
    toml = "[training]\nglobal_batch_size = 16\nlocal_batch_size = 2\n[parallelism]\nexpert_parallel_degree = 8\n"
    r = read_torchtitan_toml(toml, "job.toml")
    assert r.expert_fused_glu is False and "torchtitan" in r.where("expert_fused_glu")
    titan = estimate("qwen3-vl-30b-a3b", "dgx-h100", r, nodes=1)
    fused = estimate("qwen3-vl-30b-a3b", "dgx-h100", r, nodes=1, options={"expert_fused_glu": True})
    assert titan.evaluation.stages[0].act_bytes > fused.evaluation.stages[0].act_bytes
    assert estimate("qwen3-vl-30b-a3b", "dgx-h100", replace(r, expert_fused_glu=None),
                    nodes=1).evaluation.stages[0].act_bytes == fused.evaluation.stages[0].act_bytes


@pytest.mark.parametrize("target", ROUND_TRIP_TARGETS)
@pytest.mark.parametrize(("model", "recipe"), [
    ("llava-1.5-7b", Recipe(tp=2, pp=2, gbs=64, zero=3, recompute="full")),
    ("llava-1.5-7b", Recipe(tp=1, pp=4, vpp=2, gbs=64, zero=1, recompute="op")),
    ("llava-1.5-7b", Recipe(tp=2, pp=2, gbs=64, zero=0, pipeline_layout="Et*10|t*22L")),
    ("qwen3-vl-30b-a3b", Recipe(tp=2, pp=2, ep=4, etp=1, gbs=64, zero=1)),
    ("qwen3-vl-30b-a3b", Recipe(tp=1, pp=1, ep=8, gbs=32, zero=3, recompute="full")),
])
def test_round_trip_cases(model, recipe, target, tmp_path):
    """Fixed cases of the property, each target expressing some (an uneven split, interleaving on torchtitan, a
    MoE layout with ep on all three) and refusing others (ZeRO-3 and interleaving on DeepSpeed, torchtitan's
    per-op recompute on Megatron, recompute outside the decoder layers on torchtitan)."""
    round_trip(model, recipe, target, tmp_path)


TITAN_LAUNCH = r"""# a torchtitan 0.3 launch as export --to torchtitan writes it
torchrun $DISTRIBUTED_ARGS -m torchtitan.train --module qwen3 --config qwen3_30b_a3b \
    --parallelism.pipeline_parallel_degree 2 \
    --parallelism.pipeline_parallel_schedule Interleaved1F1B \
    --parallelism.data_parallel_shard_degree=4 \
    --parallelism.tensor_parallel_degree 2 \
    --parallelism.module_fqns_per_model_part vision_encoder,tok_embeddings,layers.0 layers.1,layers.2 layers.3 layers.4,norm,lm_head \
    --parallelism.pipeline_parallel_microbatch_size 2 \
    --training.disable_cuda_graphs \
    --training.local_batch_size 16 --training.global_batch_size 64 \
    activation_checkpoint:selective
"""


def test_torchtitan_launch_reader():
    r = read_torchtitan_overrides(TITAN_LAUNCH, "run.sh")
    assert (r.tp, r.pp, r.dp, r.mbs, r.gbs, r.zero, r.recompute) == (2, 2, 4, 2, 64, 3, "op")
    assert r.pipeline_layout == "Et*1|t*2|t*1|t*1L" and r.where("pipeline_layout") == \
        "run.sh: parallelism.module_fqns_per_model_part"
    for bad, words in ((TITAN_LAUNCH.replace("layers.1,layers.2", "layers.2,layers.1"), "out of order"),
                       (TITAN_LAUNCH.replace("vision_encoder,tok_embeddings,layers.0 ", "vision_encoder layers.0 "),
                        "without tok_embeddings"),
                       (TITAN_LAUNCH.replace("norm,lm_head", "lm_head"), "one of norm and lm_head"),
                       (TITAN_LAUNCH.replace("layers.4,", "mtp.0,layers.4,"), "not a module"),
                       (TITAN_LAUNCH.replace(" \\\n    --parallelism.module_fqns_per_model_part", " #"),
                        "pipeline_parallel_schedule")):
        with pytest.raises(ProblemError) as info:
            read_torchtitan_overrides(bad, "run.sh")
        assert str(info.value).startswith("run.sh: parallelism.") and words in str(info.value), str(info.value)
