"""Issue 32's calibration: published MoE and long-context runs with the published layout forced, one set of constants."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.calibration.published import MODELS, RUNS  # noqa: E402
from benchmarks.calibration.runs import (  # noqa: E402
    arch_model,
    calibrate_runs,
    megatron_flops,
    published_ms,
    run_layout,
    run_options,
    run_recompute,
    to_markdown,
    unsupported,
)
from partitioner.costs import model_flops_per_sample, model_layers  # noqa: E402


def _run(key: str):
    return next(r for r in RUNS if r.key == key)


@pytest.fixture(scope="module")
def doc():
    return calibrate_runs()


def test_megatrons_flop_count_is_the_models_own():
    """Megatron-LM's num_floating_point_operations (causal attention, logits) and the cost model's model FLOPs
    agree up to the router's h x E GEMM, which Megatron leaves out."""
    arch = MODELS["qwen3-235b-a22b"]
    spec = arch_model(arch, 4096, "qwen3-235b-a22b")
    ours = model_flops_per_sample(model_layers(spec))
    router = 3 * 2 * 4096 * arch.hidden * arch.experts * arch.layers
    assert megatron_flops(arch, 4096, 1) == pytest.approx(ours - router, rel=2e-3)
    assert spec.params == pytest.approx(235e9, rel=0.01)


def test_rows_are_read_and_stated_as_published():
    r = _run("mz-qwen3-235b-h100-tp2pp32ep8-a2a")
    assert published_ms(r) == (24200.0, "s/step")
    lay = run_layout(r)
    assert (lay.pp, lay.vpp, lay.dp, lay.tp, lay.ep, lay.etp, lay.zero) == (32, 3, 4, 2, 8, 1, 1)
    assert lay.split_embedding_loss  # ModelZoo's config counts embedding and loss in the split: 96 = 32 x 3
    assert run_options(r)["ep_dispatcher"] == "alltoall"
    assert run_options(_run("mz-qwen3-235b-h100-tp2pp8ep32"))["ep_dispatcher"] == "flex"
    assert run_options(_run("mz-qwen3-235b-h100-tp2pp8ep32-a2aoverlap"))["ep_overlap"] is True
    assert "moe_imbalance" not in run_options(_run("mz-qwen3-235b-h100-s16k-cp1-dropless"))  # the trained router
    assert run_options(_run("mz-qwen3-235b-h100-s16k-cp1-balanced"))["moe_imbalance"] == 1.0
    long_ctx = run_layout(_run("mz-qwen3-235b-h100-s128k-cp8-balanced"))
    assert long_ctx.etp == 1 and long_ctx.cp == 8  # ETP not in the table: the source's own config sets 1
    ms, how = published_ms(_run("mz-qwen3-235b-h100-s16k-cp1-balanced"))
    assert how == "TFLOP/s/GPU" and ms == pytest.approx(megatron_flops(MODELS["qwen3-235b-a22b"], 16384, 256)
                                                       / (295e12 * 256) * 1e3)
    assert unsupported(_run("am-dsv3-h100-256gpu")) is None  # MLA: the cost model states it (presets' MLA fields)
    assert "sinks" in (unsupported(_run("mb2604-gptoss-h100-bf16")) or "")
    assert unsupported(_run("mb2604-qwen3-30b-h100-fp8")) is not None  # FP8: not this table's


def test_recompute_and_recipe_settings_are_the_runs_own():
    # Megatron-Core --recompute-modules as the cost model's module settings, canonically ordered
    assert run_recompute(_run("mz-qwen3-235b-h100-tp2pp8ep32")) == "layernorm+moe_act"
    assert run_recompute(_run("mz-qwen3-235b-h100-s16k-cp1-balanced")) == "layernorm+moe"
    assert run_recompute(_run("mbskill-moonlight-16b-h100-recompute-mla_up_proj-mlp")) == "mla_up_proj+mlp"
    assert run_recompute(_run("mbskill-moonlight-16b-h100-recompute-none")) == "none"
    assert run_recompute(_run("dsv3-report-h800-pretrain")) == "layernorm+mla_up_proj"  # the report's "RMSNorm"
    assert run_recompute(_run("tta-llama3-8b-64gpu-bf16-vanilla")) == "op"  # torchtitan's per-op SAC
    assert run_recompute(_run("tt-llama31-8b-8gpu-bf16")) == "selective"
    assert run_layout(_run("mz-qwen3-235b-h100-tp2pp8ep32")).variant == "zero1+recompute-layernorm+moe_act"
    # Megatron-Bridge's Moonlight recipe: etp 1 (ep 8 x etp 2 would not fit 8 GPUs), its own router, bf16 moments
    moon = _run("mbskill-moonlight-16b-h100-recompute-none")
    assert run_layout(moon).etp == 1
    opts = run_options(moon)
    assert "moe_imbalance" not in opts and opts["bytes_per_param"] == 12.0 and opts["grad_bytes_per_param"] == 2.0
    # its step reads and writes those dtypes: norm 2 + clip 4 + Adam (2 + 4 + 2 + 2 read, 4 + 2 + 2 written) + cast 6
    assert opts["optimizer_step_bytes_per_param"] == 2 + 4 + (2 + 4 + 2 + 2) + (4 + 2 + 2) + (4 + 2)
    # NeMo AutoModel's benchmark configs: full activation checkpointing, FakeBalancedGate, grouped GEMM
    am = _run("am-qwen3-30b-h100-8gpu")
    assert run_layout(am).recompute == "full" and run_layout(am).zero == 3
    assert run_options(am)["moe_routing"] == "consecutive" and "zero3_keep_gathered" not in run_options(am)
    assert run_options(_run("am-dsv3-h100-256gpu"))["zero3_keep_gathered"] is True


def test_calibration_median_within_the_target(doc):
    """Issue 32's median (<= 0.10) on the calibration rows; its worst (<= 0.25) is not met (Moonlight-16B)."""
    s = doc["summary"]
    assert s["calibration"]["all"]["median_abs_ln_ratio"] <= 0.10


def test_calibration_and_holdout_medians_within_the_target(doc):
    s = doc["summary"]
    assert s["calibration"]["all"]["rows"] >= 15
    assert s["calibration"]["long-context"]["median_abs_ln_ratio"] <= 0.10
    assert s["calibration"]["long-context"]["worst_abs_ln_ratio"] <= 0.25
    # the held-out sources (NeMo AutoModel's FSDP2 runs, Bridge 25.11, Meta-style Llama 3 with CP) are not yet
    # within issue 32's 0.10 (REPORT.md says so); this guards what was reached
    assert s["holdout"]["all"]["rows"] >= 5 and s["holdout"]["all"]["median_abs_ln_ratio"] <= 0.15
    assert "| calibration | moe |" in to_markdown(doc)


def test_single_knob_families_are_ordered_as_measured(doc):
    """EP all-to-all overlap and the trained router's imbalance: each A/B pair in the measured order."""
    fams = {f["family"]: f for f in doc["families"]}
    for tag, f in fams.items():
        if tag.split(":")[0] in ("overlap", "routing"):
            assert not f["flipped"], tag
    assert sum(1 for t in fams if t.startswith("routing:")) == 4
