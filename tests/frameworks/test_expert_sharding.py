"""The export invariant for MoE plans: megatron-core's own model, built from our export, holds what the plan charged.

A small MoE language model (4 MoE decoder layers, 8 experts, top-2) is
costed by our cost model on one 8-GPU node with ep {2, 4} and etp {1, 2}
offered and no optimizer sharding (every trained parameter 18 bytes, so a
stage's weight bytes / 18 is the parameters the plan charged each of its
ranks). Each plan cuts it into two stages of 4 GPUs in one layout: ep 1
on tp 2 and tp 4 (the cost model holds the experts sharded by tp there),
ep 2 and 4 with etp 1, ep 2 with etp = tp, and ep 4 on tp 1. The Megatron
export of each plan gives the parallel sizes and the pipeline layout;
megatron-core builds its ``GPTModel`` (local layer spec, CPU, a fake
process group of the plan's 8 ranks, its own ``initialize_model_parallel``)
on the first rank of each pipeline stage, and:

* every parameter of that rank's model (``GPTModel.parameters``) is within
  1 % of what the plan charged the stage (the remainder: megatron-core
  keeps norms and the router whole on every tensor-parallel rank, the cost
  model divides every dense weight by tp);
* the routed experts' parameters on that rank equal exactly the routed
  parameters the cost model charged: routed / tp in an ep = 1 entry (the
  whole layer / tp, :func:`partitioner.costs.entry.layer_terms`), routed /
  (ep etp) in an ep > 1 entry (:func:`partitioner.costs.axes.wiring.moe_ep_cost`).

DeepSpeed (``ds_experts.py``, a subprocess: its groups are process
globals): each expressible DeepSpeed export's ``MoE(ep_size,
enable_expert_tensor_parallelism)`` builds its expert groups on a fake
world of the plan's ranks with a model-parallel unit of its tp, dp and pp;
DeepSpeed's local experts x one expert split over DeepSpeed's expert
tensor-parallel size (a gated MLP of ``moe_ffn / that size``, as
Megatron-DeepSpeed builds a tensor-parallel expert), per MoE layer of the
stage, equal the routed parameters the plan charged the stage's ranks.

The checks can fail: the same export with ``--expert-tensor-parallel-size 1``
(DeepSpeed: without ``enable_expert_tensor_parallelism``) on a plan whose
experts are charged sharded by tp 2 builds twice the expert weights, and
the checks refuse it. The Megatron check also holds for the same blocks
without experts and for an LM head tied to the embedding (its copy on the
last pipeline stage, which the plan charges there).
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

import pytest

from partitioner.costs import build_problem
from partitioner.costs.entry import weight_bytes_per_param
from partitioner.costs.layers import model_layers
from partitioner.costs.options import CostOptions
from partitioner.costs.variants import Knobs
from partitioner.frameworks.export import ExportContext, MoeHints, export_plan, hints_from_problem
from partitioner.plan import Plan, Stage, evaluate
from partitioner.presets.spec import ModelSpec, ModuleSpec
from tests.frameworks.plans import NOT_INSTALLED

pytest.importorskip("megatron.core", reason=NOT_INSTALLED)

pytestmark = pytest.mark.slow  # builds megatron-core GPT models: ~1 min on 2 cores

LLM = ModuleSpec(name="llm", kind="llm", layers=4, hidden=256, heads=4, ffn=1024, gated=True, norm="rmsnorm",
                 activation="silu", vocab=1024, text_tokens=256, experts=8, top_k=2, moe_ffn=512)
SPEC = ModelSpec("tiny-moe", (LLM,))
# the same blocks dense, and with the LM head tied to the input embedding (a copy on the last stage under pp)
MODELS = {"moe": SPEC, "dense": ModelSpec("tiny-dense", (replace(LLM, experts=0, top_k=0, moe_ffn=0),)),
          "tied": ModelSpec("tiny-moe-tied", (replace(LLM, tie_embeddings=True),))}
OPTIONS = {"ep_degrees": (2, 4), "etp_degrees": (1, 2), "zero1": False}
WORLD, GLOBAL_BATCH, MICROBATCHES = 8, 64, 8
CUTS = ((0, 2), (3, 5))  # embedding + 2 blocks | 2 blocks + head: the stages of 4 GPUs
PLANS = [(2, 2, 1, 1), (1, 4, 1, 1), (2, 2, 2, 1), (2, 2, 4, 1), (2, 2, 2, 2), (4, 1, 4, 1)]  # (dp, tp, ep, etp)
DS_HELPER = Path(__file__).with_name("ds_experts.py")


@dataclass(frozen=True)
class Charged:
    """What the plan charged one rank of a stage: all parameters, those of the routed experts, over how many layers."""

    params: float
    experts: float
    moe_layers: int


@pytest.fixture(scope="module")
def problems():
    """The problem of each of :data:`MODELS`, built on first use."""
    built: dict = {}

    def get(name: str):
        if name not in built:
            built[name] = build_problem(MODELS[name], "dgx-h100", nodes=1, global_batch=GLOBAL_BATCH,
                                        microbatches=MICROBATCHES, options=OPTIONS)
        return built[name]

    return get


@pytest.fixture(scope="module")
def problem(problems):
    return problems("moe")


def _plan(dp: int, tp: int, ep: int, etp: int) -> Plan:
    return Plan(tuple(Stage(a, b, WORLD // len(CUTS), dp, tp, ep=ep, etp=etp) for a, b in CUTS)).with_device_ids()


def _charged(problem, plan: Plan, spec: ModelSpec = SPEC) -> list[Charged]:
    """Per stage, the plan's weight bytes / bytes per parameter and the routed experts' share the cost model charged."""
    opts = CostOptions.from_mapping(OPTIONS)
    layers = model_layers(spec, opts)
    out = []
    for stage, ev in zip(plan.stages, evaluate(problem, plan).stages):
        per = weight_bytes_per_param(False, stage.dp, Knobs(0, "none"), opts)
        moe = [p.moe for layer in layers[stage.first_layer: stage.last_layer + 1] for p in layer.pieces
               if p.moe is not None]
        split = stage.tp if stage.ep == 1 else stage.ep * stage.etp  # layer_terms: / tp; moe_ep_cost: / (ep etp)
        out.append(Charged(ev.weight_bytes / per, sum(m.params for m in moe) / split, len(moe)))
    return out


def _megatron_params(core: dict, world: int, rank: int, llm: ModuleSpec = LLM) -> tuple[int, int]:
    """(all parameters, routed-expert parameters) of megatron-core's ``GPTModel`` of ``llm`` on ``rank`` under
    ``core``'s sizes (Megatron-LM ties the embeddings unless ``--untie-embeddings-and-output-weights``)."""
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state
    from megatron.core.models.common.language_module.language_module import LanguageModule
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from torch.testing._internal.distributed.fake_pg import FakeStore

    sizes = {k: core.get(k) for k in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                                      "expert_model_parallel_size", "expert_tensor_parallel_size")}
    sizes["expert_model_parallel_size"] = sizes["expert_model_parallel_size"] or 1  # a dense export writes neither
    if dist.is_initialized():
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        parallel_state.initialize_model_parallel(**sizes, create_gloo_process_groups=False, order="tp-cp-ep-dp-pp")
        exported = {k: core[k] for k in ("num_layers", "num_moe_experts", "moe_ffn_hidden_size", "moe_router_topk",
                                         "pipeline_model_parallel_layout") if k in core}
        cfg = TransformerConfig(
            **sizes, **exported, hidden_size=llm.hidden, num_attention_heads=llm.heads, ffn_hidden_size=llm.ffn,
            gated_linear_unit=True, activation_func=torch.nn.functional.silu, add_bias_linear=False,
            normalization="RMSNorm", use_cpu_initialization=True, perform_initialization=False, moe_grouped_gemm=False,
            # the dispatcher holds no weights; alltoall's constructor needs CUDA streams, absent on the CPU tier
            moe_token_dispatcher_type="allgather", pipeline_dtype=torch.float32,
            sequence_parallel=False)  # torch's norms (no Apex/TE on CPU) refuse SP; SP does not change weights
        spec = get_gpt_layer_local_spec(num_experts=llm.experts or None, moe_grouped_gemm=False, normalization="RMSNorm")
        # a tied head's copy on the last stage is all-reduced with the embedding once, on CUDA, after it is
        # allocated: that first sync (no parameter) is skipped on the CPU tier
        with mock.patch.object(LanguageModule, "_is_in_embd_group", lambda self: False):
            model = GPTModel(cfg, spec, vocab_size=llm.vocab, max_sequence_length=llm.text_tokens,
                             pre_process=parallel_state.is_pipeline_first_stage(),
                             post_process=parallel_state.is_pipeline_last_stage(), position_embedding_type="rope",
                             share_embeddings_and_output_weights=llm.tie_embeddings)
        named = list(model.named_parameters())
        return sum(p.numel() for _, p in named), sum(p.numel() for n, p in named if ".mlp.experts." in n)
    finally:
        parallel_state.destroy_model_parallel()
        dist.destroy_process_group()


def _check(core: dict, charged: list[Charged], llm: ModuleSpec = LLM) -> None:
    """Each pipeline stage's first rank holds what the plan charged its stage (AssertionError naming the stage if not)."""
    per_stage = WORLD // core["pipeline_model_parallel_size"]
    for s, want in enumerate(charged):
        total, experts = _megatron_params(core, WORLD, s * per_stage, llm)
        assert experts == want.experts, f"stage {s}: megatron-core holds {experts} expert parameters, the plan {want.experts}"
        assert total == pytest.approx(want.params, rel=0.01), f"stage {s}: megatron-core {total}, the plan {want.params}"


def _exported(problem, plan: Plan, target: str, spec: ModelSpec = SPEC):
    return export_plan(plan, hints_from_problem(problem), target,
                       ExportContext(global_batch=GLOBAL_BATCH, microbatches=MICROBATCHES, moe=MoeHints.of_model(spec)))


def _export(problem, plan: Plan, spec: ModelSpec = SPEC) -> dict:
    exp = _exported(problem, plan, "megatron", spec)
    assert exp.expressible, exp.reasons
    return exp.settings["transformer_config"]


@pytest.mark.parametrize("dp,tp,ep,etp", PLANS)
def test_megatron_model_from_the_export_holds_what_the_plan_charged(problem, dp, tp, ep, etp):
    plan = _plan(dp, tp, ep, etp)
    core = _export(problem, plan)
    assert core["expert_tensor_parallel_size"] == (tp if ep == 1 else etp)
    _check(core, _charged(problem, plan))


@pytest.mark.parametrize("model,dp,tp,ep,etp", [("dense", 2, 2, 1, 1), ("tied", 2, 2, 1, 1), ("tied", 2, 2, 2, 1)])
def test_dense_and_tied_models_hold_what_the_plan_charged(problems, model, dp, tp, ep, etp):
    """Dense blocks (no expert flags), and an LM head tied to the embedding: the last stage holds its copy."""
    spec = MODELS[model]
    plan = _plan(dp, tp, ep, etp)
    _check(_export(problems(model), plan, spec), _charged(problems(model), plan, spec), spec.modules[0])


def test_the_check_fails_when_the_export_writes_etp_1_for_experts_charged_sharded_by_tp(problem):
    plan = _plan(2, 2, 1, 1)  # ep 1 on tp 2: the cost model holds each expert over the 2 TP ranks
    core = dict(_export(problem, plan), expert_tensor_parallel_size=1)  # what the exporter wrote before
    with pytest.raises(AssertionError, match="expert parameters"):
        _check(core, _charged(problem, plan))


def _ds_job(job_id: str, plan: Plan, moe: dict) -> dict:
    s = plan.stages[0]
    return {"id": job_id, "world": WORLD, "pp": len(plan.stages), "tp": s.tp, "dp": s.dp, "hidden": LLM.hidden,
            "moe_ffn": LLM.moe_ffn, "moe": moe}


@pytest.fixture(scope="module")
def deepspeed_built(problem, tmp_path_factory):
    """DeepSpeed's experts per MoE layer on rank 0, for every expressible export and for the old export of ep 1, tp 2."""
    jobs, refused = [], {}
    for dp, tp, ep, etp in PLANS:
        exp = _exported(problem, _plan(dp, tp, ep, etp), "deepspeed")
        if exp.expressible:
            jobs.append(_ds_job(f"{dp}-{tp}-{ep}-{etp}", _plan(dp, tp, ep, etp), exp.settings["moe"]))
        else:
            refused[f"{dp}-{tp}-{ep}-{etp}"] = exp.reasons
    assert jobs[0]["id"] == "2-2-1-1" and jobs[0]["moe"]["enable_expert_tensor_parallelism"]
    old = dict(jobs[0]["moe"], enable_expert_tensor_parallelism=False)  # ep 1 on tp 2 as it was exported before
    jobs.append(_ds_job("old", _plan(2, 2, 1, 1), old))
    path = tmp_path_factory.mktemp("ds_experts") / "jobs.json"
    path.write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(DS_HELPER), str(path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return {r["id"]: r for r in json.loads(proc.stdout.strip().splitlines()[-1])}, refused


@pytest.mark.parametrize("dp,tp,ep,etp", PLANS)
def test_deepspeed_moe_from_the_export_holds_the_experts_the_plan_charged(problem, deepspeed_built, dp, tp, ep, etp):
    built, refused = deepspeed_built
    key = f"{dp}-{tp}-{ep}-{etp}"
    if key in refused:  # DeepSpeed's expert groups split the data-parallel ranks: ep must divide dp
        assert any("does not divide dp" in r for r in refused[key]), refused[key]
        return
    plan = _plan(dp, tp, ep, etp)
    ds = built[key]
    assert ds["local_experts"] == LLM.experts // ep
    for s, want in enumerate(_charged(problem, plan)):
        assert ds["expert_params"] * want.moe_layers == want.experts, (s, ds, want)


def test_deepspeed_check_fails_without_expert_tensor_parallelism_for_experts_charged_sharded_by_tp(problem,
                                                                                                  deepspeed_built):
    built, _ = deepspeed_built
    plan = _plan(2, 2, 1, 1)
    assert built["old"]["expert_tp"] == 1
    assert all(built["old"]["expert_params"] * want.moe_layers == 2 * want.experts for want in _charged(problem, plan))
