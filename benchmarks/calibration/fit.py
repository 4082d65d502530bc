"""Published runs that trained, with their layout and memory knobs forced: do they fit under our memory model?

Every row of :data:`benchmarks.calibration.published.RUNS` ran (and was measured), so
its layout, with the memory knobs it used, fitted its GPUs. This check
builds each row whose knobs are published -- the activation recompute
(none, full, selective with its ``--recompute-modules``, torchtitan's
per-op policy) and the optimizer sharding -- as the run was made: the
architecture as a language-model preset at the row's sequence, the
cluster of its GPU, the published ``tp, pp, vpp, cp, ep, etp, dp``, micro
and global batch; Megatron-LM's uniform split (the decoder layers evenly
over the ``pp x vpp`` chunks, the embedding with the first, the head with
the last; with the embedding and the head counted as layers when only that
splits evenly); then :func:`partitioner.evaluate` (rule 6: weights plus the
schedule's stash of activations per GPU) on the problem the cost model
builds. A row fits when the busiest GPU's memory is within what the cost
model lets a GPU use (:func:`~partitioner.costs.usable_memory_bytes`).

Rows left out, each with its reason: knobs not published (recompute or
sharding ``unknown``), knobs the cost model has not (activation or
optimizer offload), GPUs without a cluster preset, no published global
batch. Interleaving not published with pp > 1: checked without; a micro
batch not published: one sequence (each the least memory, so a row that
does not fit then does not fit at all). FP8 rows run their recipe
(:mod:`partitioner.costs.compute.precision`: fp8 copies of the linears' inputs,
the cached fp8 weights).

Run from the repository root::

    python -m benchmarks.calibration.fit          # prints the table; exit 0

References
----------
.. [30] NVIDIA Megatron-Core 0.16.1, ``transformer/transformer_config.py``
   (``recompute_granularity``, ``recompute_modules``).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.calibration.published import MODELS, RUNS, ModelArch, PublishedRun  # noqa: E402
from partitioner.costs import build_problem, usable_memory_bytes  # noqa: E402
from partitioner.costs.memory.recompute_names import canonical_setting, setting_of  # noqa: E402
from partitioner.costs.options import CostOptions  # noqa: E402
from partitioner.costs.variants import Knobs  # noqa: E402
from partitioner.plan import Plan, PlanError, Stage, evaluate  # noqa: E402
from partitioner.plan.cuts import interleaved_uniform_plan  # noqa: E402
from partitioner.planning.baselines import segment_config  # noqa: E402
from partitioner.planning.recipes.forced import job_cluster  # noqa: E402
from partitioner.planning.schedules.search import with_schedule  # noqa: E402
from partitioner.presets import ClusterSpec, ModelSpec, ModuleSpec, load_cluster  # noqa: E402
from partitioner.problem import Layout, ProblemError  # noqa: E402

__all__ = ["CLUSTERS", "MODULE_NAMES", "FitRow", "run_setting", "run_zero", "arch_spec", "fit_run", "fit_runs", "main"]

CLUSTERS = {"A100-80G": "dgx-a100-80g", "H100-SXM": "dgx-h100", "H800": "dgx-h100", "H200": "dgx-h200",
            "B200": "dgx-b200", "GB200": "gb200-nvl72", "H100-96G-500W": "dgx-h100"}
"""The cluster preset of each GPU. H800: an H100 SXM with slower NVLink, the same 80 GB (memory is what this
checks); H100-96G-500W: the H100 preset with 96 GB (:data:`GPU_MEMORY`)."""

GPU_MEMORY = {"H100-96G-500W": 96 * 10**9}
"""GPUs whose memory differs from their preset's: Meta's Grand Teton H100 has 96 GB of HBM2e (the sources' "96GB")."""

MODULE_NAMES = {"rmsnorm": "layernorm", "per-op SAC": "op"}
"""A source's name for a recompute module -> the cost model's (DeepSeek-V3's report recomputes "all RMSNorm
operations", Megatron's ``layernorm``; torchtitan's selective AC is the per-op policy ``op``)."""


def run_setting(run: PublishedRun) -> str | None:
    """The cost model's recompute setting for the knobs ``run`` used; None when it does not say."""
    if run.recompute in ("none", "full"):
        return run.recompute
    if run.recompute != "selective":
        return None
    mods = [MODULE_NAMES.get(m, m) for m in run.recompute_modules]
    if mods == ["op"] or (not mods and "torchtitan" in run.framework.lower()):
        return "op"  # torchtitan's selective activation checkpointing is its per-op policy
    return canonical_setting(setting_of(mods)) if mods else "selective"


def run_zero(run: PublishedRun) -> tuple[int, str] | None:
    """``(ZeRO stage, memory count)`` of the run's optimizer sharding; None when it does not say."""
    sharding = run.dp_sharding
    if sharding == "unknown":
        return None
    if "fsdp2" in sharding or sharding == "fsdp" or sharding.startswith("fsdp "):
        return 3, "fsdp2"
    if sharding == "megatron-fsdp":
        return 3, "megatron-distopt"
    if sharding in ("distributed-optimizer", "zero1"):
        return 1, "megatron-distopt"
    return 0, "megatron-distopt"


def arch_spec(arch: ModelArch, seq_len: int, name: str) -> ModelSpec:
    """The language model of a published architecture as a one-module preset over ``seq_len`` tokens per sample
    (RMSNorm, SiLU, rotary; gated or plain MLP as published; MLA widths and MTP layers where it has them). The
    attention mask is not modelled here: with flash attention it changes no stored tensor."""
    mla = arch.kv_lora_rank > 0
    llm = ModuleSpec(
        name="llm", kind="llm", layers=arch.layers, hidden=arch.hidden, heads=arch.heads, kv_heads=arch.kv_heads,
        head_dim=arch.qk_nope_head_dim if mla else arch.head_dim, ffn=arch.ffn, gated=arch.gated_mlp, norm="rmsnorm",
        activation="silu", vocab=arch.vocab, tie_embeddings=arch.tied_embeddings, text_tokens=seq_len,
        experts=arch.experts, top_k=arch.top_k, moe_ffn=arch.moe_ffn, shared_ffn=arch.shared_ffn,
        dense_layers=tuple(arch.dense_layers), q_lora_rank=arch.q_lora_rank, kv_lora_rank=arch.kv_lora_rank,
        rope_head_dim=arch.qk_rope_head_dim, v_head_dim=arch.v_head_dim if mla else 0, mtp_layers=arch.mtp_layers,
        source="benchmarks.calibration.published",
    )
    return ModelSpec(name=name, modules=(llm,), title=arch.title)


@dataclass(frozen=True)
class FitRow:
    """One run's check: its recompute setting, the busiest GPU's memory and the usable memory (GiB), or why not."""

    key: str
    setting: str | None
    zero: int | None
    peak_gib: float | None
    usable_gib: float | None
    skipped: str = ""
    note: str = ""

    @property
    def fits(self) -> bool | None:
        if self.peak_gib is None or self.usable_gib is None:
            return None
        return self.peak_gib <= self.usable_gib

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "setting": self.setting, "zero": self.zero, "peak_gib": self.peak_gib,
                "usable_gib": self.usable_gib, "fits": self.fits, "skipped": self.skipped, "note": self.note}


def _cluster(run: PublishedRun) -> ClusterSpec:
    base = load_cluster(CLUSTERS[run.gpu])
    if run.gpu in GPU_MEMORY:
        base = replace(base, gpu_memory_bytes=GPU_MEMORY[run.gpu])
    return job_cluster(base, run.gpus)  # a job on part of a node (or of an NVL72 rack)


def _skip(run: PublishedRun, setting: str | None, zero: tuple[int, str] | None) -> str:
    if setting is None:
        return "recompute not published"
    if zero is None:
        return "optimizer sharding not published"
    if run.gpu not in CLUSTERS:
        return f"no cluster preset for {run.gpu}"
    if not run.gbs:
        return "global batch not published"
    if run.offload not in ("none", "unknown"):
        return f"offload ({run.offload}): not in the cost model"
    return ""


def fit_run(run: PublishedRun, recompute: str | None = None) -> FitRow:
    """Build, force and evaluate ``run`` (module docstring); a :class:`FitRow`. ``recompute`` replaces the run's
    own recompute setting (what the run would need without its knobs)."""
    setting, zero = recompute or run_setting(run), run_zero(run)
    why = _skip(run, setting, zero)
    if why:
        return FitRow(run.key, setting, zero[0] if zero else None, None, None, why)
    assert setting is not None and zero is not None and run.gbs
    mbs = run.mbs or 1  # not published: one sequence, the least memory
    stage_zero, count = zero
    if run.dp * run.cp == 1:
        stage_zero = 0  # nothing to shard over one replica
    cluster = _cluster(run)
    nodes = run.gpus // cluster.gpus_per_node
    if run.gbs % (mbs * run.dp):
        return FitRow(run.key, setting, stage_zero, None, None, "global batch not a multiple of micro batch x dp")
    m = run.gbs // (mbs * run.dp)
    etp = run.etp if run.etp is not None else run.tp
    variant = Knobs(stage_zero, setting).name
    options: dict[str, Any] = {"variants": [variant] if variant else "none", "memory_count": count,
                               "cp_degrees": [1, run.cp], "cp_min_tokens": 1}
    if not variant:
        options.update(recompute="none", zero1=False)
    if run.fp8_recipe is not None:  # FP8 linears keep fp8 copies of their inputs (partitioner.costs.compute.precision)
        options.update(precision="fp8", fp8_recipe=run.fp8_recipe)
    if run.ep > 1:
        options.update(ep_degrees=[run.ep], etp_degrees=sorted({1, etp}))
    if "torchtitan" in run.framework.lower():  # its GroupedExperts run silu(x w1) * (x w3) as separate autograd ops
        options.update(expert_fused_glu=False)
    spec = arch_spec(MODELS[run.model], run.seq_len, run.model)
    try:
        problem = build_problem(spec, cluster, nodes=nodes, global_batch=run.gbs, microbatches=m, options=options)
    except ProblemError as err:
        return FitRow(run.key, setting, stage_zero, None, None, f"not buildable: {err}")
    P, v = run.pp, run.vpp or 1
    scheduled = with_schedule(problem, "interleaved" if v > 1 else "1f1b", v)
    d = run.dp * run.tp * run.cp
    base = interleaved_uniform_plan(scheduled, P, v, d, run.dp, run.tp, run.cp) or _even_plan(scheduled, P, v, d)
    if base is None:
        return FitRow(run.key, setting, stage_zero, None, None, "the layers do not split over the pipeline chunks")
    config = Layout(run.dp, run.tp, variant, run.cp, run.ep, etp if run.ep > 1 else 1)
    stages = []
    for s in base.stages:
        configs = [segment_config(scheduled, a, b, config) for a, b in scheduled.segments(s.first_layer, s.last_layer)]
        stages.append(Stage.from_configs(s.first_layer, s.last_layer, d, configs, s.device_ids))
    plan = Plan(tuple(stages))
    usable = usable_memory_bytes(cluster, CostOptions.from_mapping(options))
    unlimited = replace(scheduled, cluster=replace(scheduled.cluster, gpu_memory_bytes=2**62))
    try:
        ev = evaluate(unlimited, plan)
    except PlanError as err:
        return FitRow(run.key, setting, stage_zero, None, None, f"not a plan of the problem: {err}")
    notes = []
    if run.pp > 1 and run.vpp is None:
        notes.append("interleaving not published: none assumed (the least stash)")
    if not run.mbs:
        notes.append("micro batch not published: 1 assumed (the least)")
    note = "; ".join(notes)
    return FitRow(run.key, setting, stage_zero, max(ev.peak_memory_bytes) / 2**30, usable / 2**30, note=note)


def _even_plan(problem: Any, groups: int, virtual: int, devices: int) -> Plan | None:
    """Every layer -- the embedding and the head too -- split evenly over the chunks (Megatron-LM's
    ``--account-for-embedding-in-pipeline-split`` and ``--account-for-loss-in-pipeline-split``), when they divide."""
    chunks, n = groups * virtual, problem.num_layers
    if n % chunks:
        return None
    size = n // chunks
    ids = [tuple(range(g * devices, (g + 1) * devices)) for g in range(groups)]
    return Plan(tuple(Stage(c * size, (c + 1) * size - 1, devices, devices, 1, ids[c % groups]) for c in range(chunks)))


def fit_runs() -> list[FitRow]:
    """:func:`fit_run` of every published run."""
    return [fit_run(r) for r in RUNS]


def to_markdown(rows: list[FitRow]) -> str:
    checked = [r for r in rows if r.fits is not None]
    lines = ["| run | recompute | ZeRO | peak GiB | usable GiB | fits | note |", "|---|---|---|---|---|---|---|"]
    for r in checked:
        lines.append(f"| {r.key} | {r.setting} | {r.zero} | {r.peak_gib:.1f} | {r.usable_gib:.1f} | "
                     f"{'yes' if r.fits else 'NO'} | {r.note} |")
    lines.append("")
    lines.append(f"{sum(bool(r.fits) for r in checked)} of {len(checked)} checked runs fit; "
                 f"{len(rows) - len(checked)} left out:")
    reasons: dict[str, int] = {}
    for r in rows:
        if r.fits is None:
            reasons[r.skipped.split(":")[0]] = reasons.get(r.skipped.split(":")[0], 0) + 1
    lines += [f"- {why}: {n}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[FitRow]:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    rows = fit_runs()
    print(to_markdown(rows))
    return rows


if __name__ == "__main__":
    main()
