"""Calibration on published measured runs: MoE, long-context and dense BF16 runs, each with its layout forced.

Every BF16 row of :data:`benchmarks.calibration.published.RUNS` the cost model can
state -- an architecture without multi-head latent attention, on a GPU with
a cluster preset -- is built as its authors ran it: the model from the
source's architecture (:func:`arch_model`), the cluster preset of its GPU,
the published layout forced on it (:class:`partitioner.planning.recipes.forced.ForcedLayout`:
Megatron-LM's uniform pipeline split with the published virtual stages,
tp, cp, ep, etp, dp, micro and global batch) and the run's published knobs
(:func:`run_options`: recompute, optimizer sharding, dispatcher, EP overlap,
forced load balance); then :func:`partitioner.planning.recipes.forced.estimate_forced`
evaluates and replays it. Nothing is tuned per row: every row uses the
default :class:`~partitioner.costs.CostOptions` plus its own published
settings.

The published step time is the printed one (``s/step``), else the global
batch's tokens over the printed tokens per second per GPU, else the model
FLOPs over the printed TFLOP/s (:func:`megatron_flops`, Megatron-LM's
``num_floating_point_operations``, which is what those sources print).
``ratio = published time / predicted time`` (above 1: the model is
optimistic); reported per regime (median and worst ``|ln ratio|``), on the
calibration rows and on the held-out sources apart, and, for every family of
rows that differ in one knob (``layout:``, ``overlap:``, ``routing:``, ``recompute:`` ...), the
measured and predicted order and the pairs the prediction flips.

Run from the repository root (also part of ``python -m benchmarks.calibration``)::

    python -m benchmarks.calibration.runs
"""
from __future__ import annotations

import math
import statistics
import sys
from dataclasses import dataclass, replace
from itertools import combinations
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.calibration.published import MODELS, RUNS, ModelArch, PublishedRun  # noqa: E402
from partitioner.costs.memory.recompute_names import modules_of, setting_of  # noqa: E402
from partitioner.plan import PlanError  # noqa: E402
from partitioner.planning.recipes.forced import ForcedEstimate, ForcedLayout, estimate_forced  # noqa: E402
from partitioner.presets import ModelSpec, ModuleSpec  # noqa: E402
from partitioner.problem import ProblemError  # noqa: E402

__all__ = ["CLUSTERS", "CalibrationRow", "arch_model", "run_options", "run_recompute", "run_layout", "megatron_flops",
           "published_ms", "unsupported", "evaluate_run", "calibrate_runs", "family_orders", "to_markdown", "main"]

#: The cluster preset of each published GPU (H800 and the 500 W Grand Teton H100 have none).
CLUSTERS = {"A100-80G": "dgx-a100-80g", "H100-SXM": "dgx-h100", "H200": "dgx-h200", "B200": "dgx-b200",
            "GB200": "gb200-nvl72"}
#: How each source's framework runs its grouped expert GEMMs (Megatron-Core and NeMo AutoModel: Transformer
#: Engine's GroupedLinear; torchtitan: torch._grouped_mm, one launch).
_SINGLE_LAUNCH = ("torchtitan", "torchao")
_REGIMES = ("moe", "long-context", "dense")
#: The family kinds whose order is reported: rows differing in one knob the cost model prices.
_ORDERED_FAMILIES = ("layout", "overlap", "routing", "recompute", "dispatcher", "schedule")


def arch_model(arch: ModelArch, seq_len: int, name: str, mtp_layers: int | None = None) -> ModelSpec:
    """The language model of a published architecture as a one-module preset, ``seq_len`` tokens per sample.

    RMSNorm, SiLU (gated) MLPs, rotary positions, no biases unless the
    architecture has them; Qwen3's per-head QK-norm; gpt-oss's alternating
    128-token sliding windows (full attention on odd layers) and attention
    biases; Llama 4 Scout's 8192-token chunks equal the published 8192-token
    sequences, so its chunked layers attend as full causal ones. Multi-head
    latent attention (DeepSeek-V3, Kimi-K2, Moonlight) with its sigmoid router
    and ``mtp_layers`` multi-token prediction modules (default: the model's).
    """
    if mtp_layers is None:
        mtp_layers = arch.mtp_layers
    qwen3 = name.startswith("qwen3")
    gptoss = name.startswith("gpt-oss")
    mla: dict[str, Any] = {}
    if arch.kv_lora_rank:  # multi-head latent attention: the preset's fields (partitioner.presets, DeepSeek-V3)
        mla = dict(head_dim=arch.qk_nope_head_dim, rope_head_dim=arch.qk_rope_head_dim, v_head_dim=arch.v_head_dim,
                   q_lora_rank=arch.q_lora_rank, kv_lora_rank=arch.kv_lora_rank, kv_heads=0, mtp_layers=mtp_layers,
                   router_score="sigmoid")
    llm = ModuleSpec(
        name="llm", kind="llm", layers=arch.layers, hidden=arch.hidden, heads=arch.heads, kv_heads=arch.kv_heads,
        head_dim=arch.head_dim, ffn=arch.ffn, gated=arch.gated_mlp, norm="rmsnorm", activation="silu",
        qk_norm=qwen3, qk_norm_dim=arch.head_dim if qwen3 else 0, qkv_bias=gptoss, vocab=arch.vocab,
        tie_embeddings=arch.tied_embeddings, text_tokens=seq_len, experts=arch.experts, top_k=arch.top_k,
        moe_ffn=arch.moe_ffn, shared_ffn=arch.shared_ffn, dense_layers=tuple(arch.dense_layers),
        norm_topk=arch.experts > 0, window=128 if gptoss else 0,
        full_layers=tuple(range(1, arch.layers, 2)) if gptoss else (), source="benchmarks.calibration.published",
    )
    if mla:
        llm = replace(llm, **mla)
    return ModelSpec(name=name, modules=(llm,), title=arch.title)


def unsupported(run: PublishedRun) -> str | None:
    """Why ``run`` is left out of the table, or None when the cost model can state it."""
    arch = MODELS[run.model]
    if run.precision != "bf16":
        return "FP8 precision (the FP8 cost terms are another helper's)"
    if run.gpu not in CLUSTERS:
        return f"no cluster preset for {run.gpu}"
    if "sinks" in arch.attention:
        return ("attention with learned sinks: which kernel ran it (Transformer Engine's flash and fused paths lack "
                "learnable softmax before cuDNN 9.18, then fall back to unfused attention) is not published")
    if not (run.mbs or run.gbs):
        return "no batch printed"
    if run.pp > 1 and run.vpp is None:
        return "pipeline interleaving not published"
    return None


#: What a source's own configuration fixes where its table is silent. ModelZoo's Qwen3-235B model config
#: (``model_configs/benchmarking/Qwen3-235B-A22B.yaml`` at e865051) sets ``--expert-tensor-parallel-size 1``,
#: ``--account-for-embedding-in-pipeline-split`` and ``--account-for-loss-in-pipeline-split`` for every run.
#: Megatron-Bridge's Moonlight-16B pretrain recipe (``recipes/moonlight/moonlight_16b.py`` at 08de997, the
#: recipe the Moonlight recompute study ran): ``expert_tensor_parallel_size = 1``, the precision-aware
#: optimizer with fp32 main parameters and bf16 main gradients and Adam moments, ``grad_reduce_in_fp32``
#: False: 2 (bf16 weight) + 2 (bf16 gradient) + 4 + 2 + 2 (fp32 master, bf16 moments, sharded) bytes per
#: parameter, gradients reduced in bf16; its step moves the same dtypes, counted as the default
#: ``optimizer_step_bytes_per_param`` (46) counts fp32 ones: gradient norm (read 2), clipping (read and write 4),
#: Adam (read gradient 2, master 4, m 2, v 2; write master 4, m 2, v 2), master to bf16 weight (read 4,
#: write 2) = 30; ``moe_router_force_load_balancing = False``: the router's own routing (``trained_router``).
#: NeMo AutoModel's benchmark configurations
#: (``examples/benchmark/configs/*_te_deepep.yaml``) set ``parallelizer.activation_checkpointing: true``, which
#: wraps every decoder block in a checkpoint wrapper (``components/moe/parallelizer.py`` ``apply_ac``: full
#: recompute), the DeepSeek-V3 one keeps FSDP2's gathered parameters (``reshard_after_forward: false``); their
#: ``fake_balanced_gate: true`` routes each token to ``k`` consecutive experts (``moe_routing``), and with
#: DeepEP the experts run as one grouped GEMM launch (``GroupedExpertsDeepEP``: ``grouped_gemm.ops.gmm``).
#: Megatron-Bridge's DeepSeek-V3 GB200 BF16 workload configuration recomputes ``mla_up_proj``
#: (``scripts/performance/configs/deepseek/deepseek_workload_base_configs.py``, every version read). Keys
#: ``source`` or ``source:model``; ``recompute`` applies where the row does not say; ``options`` are cost options.
SOURCE_SETTINGS: dict[str, dict[str, Any]] = {
    "modelzoo-qwen3": {"etp": 1, "split_embedding_loss": True},
    "automodel-perf": {"recompute": "full", "options": {"moe_routing": "consecutive", "grouped_gemm": "single_launch"}},
    "automodel-perf:deepseek-v3": {"recompute": "full", "options": {"moe_routing": "consecutive",
                                                                    "grouped_gemm": "single_launch",
                                                                    "zero3_keep_gathered": True}},
    "mbridge-25.11:deepseek-v3": {"recompute": "mla_up_proj"},
    "mbridge-skills:moonlight-16b-a3b": {"etp": 1, "trained_router": True, "options": {"bytes_per_param": 12.0,
                                                               "optimizer_bytes_per_param": 8.0,
                                                               "grad_bytes_per_param": 2.0,
                                                               "optimizer_step_bytes_per_param": 30.0}},
}


def _source_settings(run: PublishedRun) -> dict[str, Any]:
    """The source's settings (:data:`SOURCE_SETTINGS`), the model's within the source over them."""
    return {**SOURCE_SETTINGS.get(run.source, {}), **SOURCE_SETTINGS.get(f"{run.source}:{run.model}", {})}


#: Published spellings of Megatron-Core's recompute modules (DeepSeek-V3's report: RMSNorm).
_MODULE_SPELLING = {"rmsnorm": "layernorm"}


def run_recompute(run: PublishedRun) -> str:
    """The recompute setting a run used (:mod:`partitioner.costs.memory.recompute_names`).

    ``full``; ``selective`` with Megatron-Core's ``--recompute-modules`` (the
    module set, canonically spelled); ``selective`` without modules
    (Megatron's default, the attention core); torchtitan's per-op selective
    checkpointing (``op``); none when the run recomputed nothing; when it does
    not say, its source's configuration (:data:`SOURCE_SETTINGS`), else none.
    """
    if run.recompute == "unknown":
        return str(_source_settings(run).get("recompute", "none"))
    if run.recompute == "full":
        return "full"
    if run.recompute != "selective":
        return "none"
    modules = [_MODULE_SPELLING.get(m, m) for m in run.recompute_modules]
    if not modules:
        return "selective"
    if modules == ["per-op SAC"]:
        return "op"
    return setting_of(modules_of("+".join(modules)))


def run_layout(run: PublishedRun) -> ForcedLayout:
    """The published layout with the run's memory knobs (distributed optimizer: ZeRO-1, FSDP: ZeRO-3).

    An expert-tensor degree the row leaves out is the source's own setting (:data:`SOURCE_SETTINGS`),
    else Megatron's default (etp = tp).
    """
    source = _source_settings(run)
    sharding = run.dp_sharding
    zero = 3 if "fsdp" in sharding else 1
    recompute = run_recompute(run)
    etp = run.etp if run.etp is not None else source.get("etp")
    return ForcedLayout(pp=run.pp, dp=run.dp, tp=run.tp, cp=run.cp, ep=run.ep,
                        etp=etp if run.ep > 1 else None, vpp=run.vpp or 1, zero=zero, recompute=recompute,
                        split_embedding_loss=bool(source.get("split_embedding_loss", False)))


def run_options(run: PublishedRun) -> dict[str, Any]:
    """The cost options a run's published settings imply (the rest: the defaults).

    Dispatcher (``flex`` for DeepEP and HybridEP, else ``alltoall``), EP
    overlap, forced load balance (``moe_imbalance`` 1: rows that force it,
    and rows that do not say how they routed -- read as the sources'
    benchmark setting), torchtitan's single-launch grouped GEMM, and
    Meta's FSDP keeping the gathered parameters between forward and backward.
    """
    settings = _source_settings(run)
    out: dict[str, Any] = dict(settings.get("options", {}))
    moe = run.moe
    if moe is not None:
        dispatcher = "flex" if ("deepep" in moe.dispatcher or "hybridep" in moe.dispatcher) else "alltoall"
        if moe.dispatcher == "allgather":
            dispatcher = "allgather"
        out["ep_dispatcher"] = dispatcher
        if moe.a2a_overlap and run.ep > 1 and run_recompute(run) != "full":
            out["ep_overlap"] = True
        if moe.routing == "force-balanced" or (moe.routing == "unknown" and not settings.get("trained_router")):
            # a table that does not say how it routed is read as the benchmark setting of these sources
            # (the Megatron-Bridge performance recipes force balance); only rows that say they used the
            # trained router, or whose recipe does (SOURCE_SETTINGS), pay the derived imbalance
            out["moe_imbalance"] = 1.0
        if moe.capacity_factor is not None and moe.dropless is False:
            out["capacity_factor"] = moe.capacity_factor
    if any(k in run.framework.lower() for k in _SINGLE_LAUNCH):
        out["grouped_gemm"] = "single_launch"
    if "kept gathered" in run.dp_sharding:
        out["zero3_keep_gathered"] = True
    if run.dp_sharding == "megatron-fsdp":
        # Megatron-FSDP accumulates and reduces gradients in the model's dtype unless told otherwise
        # (``--megatron-fsdp-main-grads-dtype`` "Defaults to auto ... the model native gradient data-type",
        # Megatron-LM docs/user-guide/features/megatron_fsdp.md at d98e8a6): 2 B per parameter in BF16
        out["grad_bytes_per_param"] = 2.0
    return out


def megatron_flops(arch: ModelArch, seq_len: int, samples: int) -> float:
    """Model FLOPs of ``samples`` sequences as Megatron-LM's ``num_floating_point_operations`` counts them.

    Per token, 3 x 2 FLOPs per multiply-add: the QKV and output projections,
    the causal attention core (``q s / 2`` query-key pairs x 2 matmuls), the
    dense MLP (3 matrices gated) or the ``k`` routed experts and the shared
    ones, and the logits (``h V``). Standard attention only (no MLA).
    """
    h, q, kv = arch.hidden, arch.heads * arch.head_dim, arch.kv_heads * arch.head_dim
    mats = 3 if arch.gated_mlp else 2
    attn = 6 * (h * (q + 2 * kv) + q * h) + 6 * q * seq_len
    dense = 6 * h * arch.ffn * mats
    moe = 6 * h * arch.moe_ffn * mats * arch.top_k + 6 * h * arch.shared_ffn * mats
    n_moe = arch.moe_layers
    per_token = arch.layers * attn + (arch.layers - n_moe) * dense + n_moe * moe + 6 * h * arch.vocab
    return per_token * seq_len * samples


def published_ms(run: PublishedRun) -> tuple[float, str]:
    """The published step time in ms and how it was read (printed time, tokens/s or TFLOP/s)."""
    gbs = run.gbs or 0
    step = run.value("s/step")
    if step is not None:
        return step * 1e3, "s/step"
    tokens = run.value("tokens/s/GPU")
    if tokens is not None:
        return gbs * run.seq_len / (tokens * run.gpus) * 1e3, "tokens/s/GPU"
    tflops = run.value("TFLOP/s/GPU")
    if tflops is not None:
        return megatron_flops(MODELS[run.model], run.seq_len, gbs) / (tflops * 1e12 * run.gpus) * 1e3, "TFLOP/s/GPU"
    raise ValueError(f"{run.key}: no step time, tokens/s or TFLOP/s printed")


@dataclass(frozen=True)
class CalibrationRow:
    """One published run, evaluated with its layout forced."""

    run: PublishedRun
    published_ms: float
    read_from: str
    predicted_ms: float
    peak_memory_gib: float
    gpu_memory_gib: float
    fits: bool
    regimes: tuple[str, ...]

    @property
    def ratio(self) -> float:
        """Published time over predicted (above 1: the model is optimistic)."""
        return self.published_ms / self.predicted_ms

    @property
    def abs_ln(self) -> float:
        return abs(math.log(self.ratio))

    def to_dict(self) -> dict[str, Any]:
        r = self.run
        return {"key": r.key, "source": r.source, "model": r.model, "gpu": r.gpu, "gpus": r.gpus,
                "layout": {"tp": r.tp, "pp": r.pp, "vpp": r.vpp, "cp": r.cp, "ep": r.ep, "etp": r.etp, "dp": r.dp,
                           "mbs": r.mbs, "gbs": r.gbs, "seq": r.seq_len},
                "regimes": list(self.regimes), "holdout": r.holdout, "published_ms": self.published_ms,
                "read_from": self.read_from, "predicted_ms": self.predicted_ms, "ratio": self.ratio,
                "abs_ln_ratio": self.abs_ln, "peak_memory_gib": self.peak_memory_gib,
                "gpu_memory_gib": self.gpu_memory_gib, "fits": self.fits, "families": list(r.families)}


def _regimes(run: PublishedRun) -> tuple[str, ...]:
    out = ["moe" if "moe" in run.regime else "dense"]
    if "long-context" in run.regime:
        out.append("long-context")
    return tuple(out)


def evaluate_run(run: PublishedRun, options: dict[str, Any] | None = None) -> CalibrationRow:
    """``run`` built and forced as published (:func:`run_layout`, :func:`run_options`), evaluated and replayed."""
    layout = run_layout(run)
    mbs = run.mbs or 1
    mtp = 0 if "w/o MTP" in run.notes else None  # a run with the MTP module removed says so
    model = arch_model(MODELS[run.model], run.seq_len, run.model, mtp)
    est: ForcedEstimate = estimate_forced(model, CLUSTERS[run.gpu], layout, global_batch=run.gbs or mbs * run.dp,
                                          microbatch=mbs, options={**run_options(run), **(options or {})})
    pub, how = published_ms(run)
    return CalibrationRow(run, pub, how, est.iteration_ms, est.peak_memory_bytes / 2**30,
                          est.gpu_memory_bytes / 2**30, est.fits, _regimes(run))


def family_orders(rows: list[CalibrationRow]) -> list[dict[str, Any]]:
    """Per family of rows differing in one knob: the measured and predicted order (fastest first) and flips."""
    out = []
    tags = sorted({t for row in rows for t in row.run.families if t.split(":")[0] in _ORDERED_FAMILIES})
    for tag in tags:
        members = [row for row in rows if tag in row.run.families]
        if len(members) < 2:
            continue
        measured = sorted(members, key=lambda r: r.published_ms)
        predicted = sorted(members, key=lambda r: r.predicted_ms)
        flips = [(a.run.key, b.run.key) for a, b in combinations(members, 2)
                 if (a.published_ms - b.published_ms) * (a.predicted_ms - b.predicted_ms) < 0]
        out.append({"family": tag, "measured": [r.run.key for r in measured],
                    "predicted": [r.run.key for r in predicted], "pairs": len(members) * (len(members) - 1) // 2,
                    "flipped": flips, "holdout": all(r.run.holdout for r in members)})
    return out


def _summary(rows: list[CalibrationRow]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for split, keep in (("calibration", False), ("holdout", True)):
        part = [r for r in rows if r.run.holdout == keep]
        per: dict[str, Any] = {}
        for regime in (*_REGIMES, "all"):
            sel = [r for r in part if regime == "all" or regime in r.regimes]
            if sel:
                worst = max(sel, key=lambda r: r.abs_ln)
                per[regime] = {"rows": len(sel), "median_abs_ln_ratio": statistics.median(r.abs_ln for r in sel),
                               "worst_abs_ln_ratio": worst.abs_ln, "worst_row": worst.run.key,
                               "optimistic": sum(r.ratio > 1 for r in sel)}
        out[split] = per
    return out


def calibrate_runs(options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every statable row evaluated; summaries per regime and split; the families' orders; rows left out."""
    rows, skipped = [], []
    for run in RUNS:
        why = unsupported(run)
        if why is not None:
            skipped.append({"key": run.key, "reason": why})
            continue
        try:
            rows.append(evaluate_run(run, options))
        except (ProblemError, PlanError) as err:  # over the problem format's limits, or not a plan (named)
            skipped.append({"key": run.key, "reason": f"not evaluable: {err}"})
    return {"rows": [r.to_dict() for r in rows], "summary": _summary(rows), "families": family_orders(rows),
            "skipped": skipped, "options": options or {}}


def to_markdown(doc: dict[str, Any], command: str = "python -m benchmarks.calibration") -> str:
    """The MoE / long-context / dense BF16 section of ``benchmarks/results/calibration.md``."""
    lines = ["## Published MoE, long-context and dense BF16 runs, layouts forced", "",
             f"Made by `{command}` (`benchmarks/calibration/runs.py`) from `benchmarks/calibration/published.py`. Each row: the "
             "published layout forced on the source's architecture (Megatron-LM's uniform pipeline split with the "
             "published virtual stages), the run's published knobs, default constants; evaluated and replayed. "
             "ratio = published step time / predicted (above 1: optimistic). `H`: held-out source. Memory: the "
             "replay's peak per GPU against what the cost model lets a GPU use (`no`: the plan does not fit as the "
             "cost model counts memory; its time is still predicted).", ""]
    s = doc["summary"]
    lines += ["| split | regime | rows | median \\|ln ratio\\| | worst | worst row | optimistic |", "|---|---|---|---|---|---|---|"]
    for split in ("calibration", "holdout"):
        for regime, v in s.get(split, {}).items():
            lines.append(f"| {split} | {regime} | {v['rows']} | {v['median_abs_ln_ratio']:.3f} | "
                         f"{v['worst_abs_ln_ratio']:.3f} | {v['worst_row']} | {v['optimistic']}/{v['rows']} |")
    lines += ["", "| row | GPU | GPUs | TP | PP | VPP | CP | EP | ETP | DP | MBS | GBS | seq | published ms (from) | "
              "predicted ms | ratio | memory GiB (fits) | H |", "|" + "---|" * 18]
    for r in doc["rows"]:
        lay = r["layout"]
        lines.append(
            f"| {r['key']} | {r['gpu']} | {r['gpus']} | {lay['tp']} | {lay['pp']} | {lay['vpp'] or '-'} | {lay['cp']} | "
            f"{lay['ep']} | {lay['etp'] or '-'} | {lay['dp']} | {lay['mbs'] or '-'} | {lay['gbs']} | {lay['seq']} | "
            f"{r['published_ms']:.0f} ({r['read_from']}) | {r['predicted_ms']:.0f} | {r['ratio']:.3f} | "
            f"{r['peak_memory_gib']:.1f} / {r['gpu_memory_gib']:.1f} ({'yes' if r['fits'] else 'no'}) | "
            f"{'H' if r['holdout'] else ''} |")
    lines += ["", "Families (rows that differ in one knob): measured and predicted order, fastest first.", "",
              "| family | measured | predicted | flipped pairs |", "|---|---|---|---|"]
    for f in doc["families"]:
        lines.append(f"| {f['family']}{' (H)' if f['holdout'] else ''} | {' < '.join(f['measured'])} | "
                     f"{' < '.join(f['predicted'])} | {len(f['flipped'])} of {f['pairs']} |")
    sens = doc.get("host_floor")
    if sens:
        parts = [f"{split} {regime} {v['median_abs_ln_ratio']:.3f} / {v['worst_abs_ln_ratio']:.3f}"
                 for split, per in sens["summary"].items() for regime, v in per.items() if regime == "all"]
        flips = "; ".join(f"{f['family']}: {len(f['flipped'])} of {f['pairs']} flipped" for f in sens["families"]
                          if f["family"].startswith("layout:"))
        lines += ["", f"Sensitivity, not the default: with the optional host floor `moe_host_ms={sens['options']['moe_host_ms']:g}` "
                  f"(a MoE layer's forward and backward take at least that long to launch): median / worst "
                  f"{', '.join(parts)}; {flips}."]
    if doc["skipped"]:
        reasons: dict[str, int] = {}
        for sk in doc["skipped"]:
            reasons[sk["reason"]] = reasons.get(sk["reason"], 0) + 1
        lines += ["", "Rows left out: " + "; ".join(f"{n} x {why}" for why, n in sorted(reasons.items())) + "."]
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    doc = calibrate_runs()
    for r in doc["rows"]:
        print(f"{r['key']:48s} {r['published_ms']:10.0f} {r['predicted_ms']:10.0f} ratio {r['ratio']:.3f}"
              f" mem {r['peak_memory_gib']:6.1f}/{r['gpu_memory_gib']:.1f}{'' if r['fits'] else ' NOFIT'}"
              f"{' H' if r['holdout'] else ''}")
    for split, per in doc["summary"].items():
        for regime, v in per.items():
            print(f"{split:11s} {regime:12s} rows {v['rows']:3d} median {v['median_abs_ln_ratio']:.3f} "
                  f"worst {v['worst_abs_ln_ratio']:.3f} ({v['worst_row']})")
    for f in doc["families"]:
        print(f"{f['family']}: flipped {len(f['flipped'])} of {f['pairs']}")
    return doc


if __name__ == "__main__":
    main()


def fit_efficiency(generation: str, low: float = 0.3, high: float = 0.9, steps: int = 12) -> dict[str, Any]:
    """The ``efficiency_max`` at which the median ``ln ratio`` of ``generation``'s calibration rows is 0.

    One constant for every calibration row of the generation (never per row; held-out rows excluded), by
    bisection; the procedure behind the per-generation values of :mod:`partitioner.costs.compute.hardware` that
    are calibrated rather than derived. Returns the value and the rows it used.
    """
    from partitioner.costs import load_cluster
    from partitioner.presets import gpu_generation

    rows = [r for r in RUNS if unsupported(r) is None and not r.holdout
            and gpu_generation(load_cluster(CLUSTERS[r.gpu])) == generation]

    def median_ln(value: float) -> float:
        logs = []
        for run in rows:
            try:
                logs.append(math.log(evaluate_run(run, {"efficiency_max": value}).ratio))
            except (ProblemError, PlanError):
                continue
        return statistics.median(logs)

    for _ in range(steps):  # a higher ceiling predicts faster: ln ratio rises with it
        mid = 0.5 * (low + high)
        if median_ln(mid) > 0:
            high = mid
        else:
            low = mid
    return {"generation": generation, "efficiency_max": 0.5 * (low + high), "rows": [r.key for r in rows]}
