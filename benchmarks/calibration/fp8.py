"""Calibration, FP8: published FP8 runs evaluated as published, and FP8 against BF16 of the same run.

Two tables, from the measured runs of :mod:`benchmarks.calibration.published` (helper
``research``'s collection, each row cited there), through the project's own
cost model with nothing tuned per row -- the default
:class:`~partitioner.costs.CostOptions` plus each run's published settings:

* **pairs** -- every ``precision:`` family (rows that differ only in
  precision or FP8 recipe): each member's throughput predicted with its
  precision, and the predicted speed-up over the family's first member
  against the published one. This is what issue 34 asks of the FP8 model:
  the FP8/BF16 (or recipe/recipe) ratio of runs whose layout is fixed.
* **absolute** -- the dense FP8 runs on the presets' GPUs (DGX-H100,
  DGX-B200): predicted tokens/s/GPU against the published number.

A run is built as published: the model from :data:`~benchmarks.calibration.published.MODELS`
(dense architectures; MoE and MLA models are left to the MoE and MLA tables),
the cluster preset of its GPU, the published layout forced -- tp, pp, cp,
dp, virtual stages, microbatch, global batch -- as Megatron-LM's uniform
split (:func:`~partitioner.plan.cuts.interleaved_uniform_plan`), the memory
knobs as published (Megatron's distributed optimizer is ZeRO-1, FSDP
ZeRO-3, full recompute when printed; torchtitan's per-op selective
checkpointing has no cost-model knob and is read as none), evaluated and
replayed by the simulator. Time is evaluated without the memory rule (the
problem's GPUs get ample memory), and the peak memory the model counts is
reported against the GPU's, so that a run the model thinks too large still
gets a predicted time; the table says which.

The torchtitan rows ran on Meta's Grand Teton H100 (96 GB HBM2e at 2.4 TB/s,
power-capped at 500 W): they use the DGX-H100 preset with that memory and
bandwidth; the power cap is not modelled, so their absolute prediction is
optimistic and their precision ratio is the number to read. GB200 rows are
skipped: a job on part of a 72-GPU NVL72 rack cannot be stated yet (issue
34's rack work).

Run from the repository root::

    python -m benchmarks.calibration.fp8      # writes results/calibration_fp8.{json,md}
"""
from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.calibration import results_cli  # noqa: E402
from benchmarks.calibration.published import MODELS, RUNS, ModelArch, PublishedRun, families  # noqa: E402
from partitioner import evaluate  # noqa: E402
from partitioner.costs import CostOptions, Knobs, build_problem, load_cluster, usable_memory_bytes  # noqa: E402
from partitioner.plan.cuts import interleaved_uniform_plan  # noqa: E402
from partitioner.planning import simulate_plan  # noqa: E402
from partitioner.planning.schedules.search import with_schedule  # noqa: E402
from partitioner.presets import ClusterSpec, ModelSpec, ModuleSpec  # noqa: E402

__all__ = ["CLUSTERS", "cluster_for", "model_for", "run_options", "evaluate_run", "pair_rows", "absolute_rows",
           "calibrate", "to_markdown", "main"]

TOKENS = "tokens/s/GPU"


def _grand_teton() -> ClusterSpec:
    """Meta's Grand Teton H100 (torchtitan's benchmarks): the DGX-H100 preset with 96 GB HBM2e at 2.4 TB/s.

    benchmarks.calibration.published notes the part (96 GB HBM2e, 2.4 TB/s, 500 W);
    its tensor-core peak, NVLink and NIC are taken as the SXM part's and
    the 500 W cap is not modelled.
    """
    return dataclasses.replace(load_cluster("dgx-h100"), name="grand-teton-h100-96g", gpu="H100 96GB HBM2e (500 W)",
                               gpu_memory_bytes=96 * 10**9, hbm_GBps=2400.0)


# published GPU name -> cluster preset (None: skipped, with the reason)
CLUSTERS: dict[str, str | None] = {"H100-SXM": "dgx-h100", "H200": "dgx-h200", "B200": "dgx-b200",
                                   "H100-96G-500W": "grand-teton", "GB200": None, "A100-80G": "dgx-a100-80g"}


def cluster_for(run: PublishedRun) -> ClusterSpec | None:
    """The cluster preset a run is evaluated on (None: not stated yet, see the module docstring)."""
    name = CLUSTERS.get(run.gpu)
    if name is None:
        return None
    return _grand_teton() if name == "grand-teton" else load_cluster(name)


def model_for(run: PublishedRun) -> ModelSpec | None:
    """A dense Llama-style decoder (RMSNorm, SwiGLU, GQA, RoPE) of the run's architecture; None for MoE / MLA."""
    arch: ModelArch = MODELS[run.model]
    if arch.is_moe or arch.kv_lora_rank:
        return None
    llm = ModuleSpec(name="llm", kind="llm", layers=arch.layers, hidden=arch.hidden, heads=arch.heads,
                     kv_heads=arch.kv_heads, head_dim=arch.head_dim, ffn=arch.ffn, gated=arch.gated_mlp, norm="rmsnorm",
                     activation="silu", vocab=arch.vocab, tie_embeddings=arch.tied_embeddings, text_tokens=run.seq_len)
    return ModelSpec(name=run.model, modules=(llm,), title=arch.title)


def run_options(run: PublishedRun) -> tuple[dict[str, Any], Knobs]:
    """The run's published settings as cost options, and its memory knobs (the stages' variant)."""
    zero = {"distributed-optimizer": 1, "zero1": 1, "fsdp2": 3, "megatron-fsdp": 3}.get(run.dp_sharding, 0)
    recompute = "full" if run.recompute == "full" else "none"  # selective: the attention core, nothing under flash
    knobs = Knobs(zero if run.dp * run.cp > 1 else 0, recompute)
    opts: dict[str, Any] = {"variants": [knobs.name or "none"] if knobs.name else ["none"],
                            "cp_degrees": sorted({1, run.cp}), "cp_min_tokens": 1}
    if zero == 3 and run.dp_sharding == "fsdp2":
        opts["memory_count"] = "fsdp2"
    recipe = run.fp8_recipe
    if recipe is not None:
        opts.update(precision="fp8", fp8_recipe=recipe)
    return opts, knobs


def evaluate_run(run: PublishedRun) -> dict[str, Any]:
    """One run built and planned as published, evaluated and replayed; the prediction against the publication.

    Raises ValueError when the run cannot be stated (its cluster, its model,
    a layout the uniform split cannot cut).
    """
    cluster, model = cluster_for(run), model_for(run)
    if cluster is None:
        raise ValueError(f"{run.gpu}: no cluster preset states a job on {run.gpus} of its GPUs yet")
    if model is None:
        raise ValueError(f"{run.model}: MoE/MLA architecture (left to the MoE and MLA tables)")
    mbs, gbs = run.mbs, run.gbs
    if mbs is None or gbs is None:
        raise ValueError("micro or global batch not published")
    m = gbs // (mbs * run.dp)
    v = run.vpp or 1
    opts, knobs = run_options(run)
    roomy = dataclasses.replace(cluster, gpu_memory_bytes=10**14)  # time without the memory rule (module docstring)
    nodes = max(1, run.gpus // cluster.gpus_per_node)
    problem = build_problem(model, roomy, nodes=nodes, global_batch=gbs, microbatches=m, options=opts)
    problem = with_schedule(problem, "interleaved" if v > 1 else "1f1b", v)
    plan = interleaved_uniform_plan(problem, run.pp, v, run.gpus // run.pp, run.dp, run.tp, run.cp)
    if plan is None:
        raise ValueError(f"fewer decoder layers than {run.pp} x {v} chunks")
    if knobs.name:
        plan = dataclasses.replace(plan, stages=tuple(dataclasses.replace(s, variant=knobs.name) for s in plan.stages))
    ev = evaluate(problem, plan)
    sim = simulate_plan(problem, plan, ev)
    iteration_ms = float(sim.makespan_ms)
    predicted = gbs * run.seq_len / (iteration_ms / 1e3) / run.gpus
    published = run.value(TOKENS)
    peak = sim.peak_bytes
    usable = usable_memory_bytes(cluster, CostOptions.from_mapping({k: v for k, v in opts.items()
                                                                    if k in ("memory_count",)}))
    return {
        "key": run.key, "model": run.model, "gpu": run.gpu, "cluster": cluster.name, "gpus": run.gpus,
        "precision": run.precision, "tp": run.tp, "pp": run.pp, "cp": run.cp, "dp": run.dp, "vpp": v, "mbs": mbs,
        "gbs": gbs, "m": m, "seq_len": run.seq_len, "knobs": knobs.name or "plain", "framework": run.framework,
        "iteration_ms": iteration_ms, "predicted_tokens": predicted, "published_tokens": published,
        "ratio": predicted / published if published else None,
        "peak_memory_bytes": peak, "usable_memory_bytes": usable, "fits": peak is not None and peak <= usable,
        "holdout": run.holdout,
    }


def pair_rows() -> list[dict[str, Any]]:
    """Every ``precision:`` family: each member against the first (the BF16 run where there is one)."""
    out = []
    for tag, runs in families().items():
        if not tag.startswith("precision:"):
            continue
        ordered = sorted(runs, key=lambda r: r.precision != "bf16")  # the BF16 member first
        try:
            results = [evaluate_run(r) for r in ordered]
        except ValueError as err:
            out.append({"family": tag, "skipped": str(err), "members": [r.key for r in ordered]})
            continue
        base = results[0]
        for r in results[1:]:
            pred = r["predicted_tokens"] / base["predicted_tokens"]
            pub = (r["published_tokens"] / base["published_tokens"]) if r["published_tokens"] and base["published_tokens"] \
                else None
            out.append({"family": tag, "base": base, "run": r, "predicted_speedup": pred, "published_speedup": pub,
                        "ratio": pred / pub if pub else None})
    return out


def absolute_rows() -> list[dict[str, Any]]:
    """The dense FP8 runs the presets state (H100, B200): predicted against published tokens/s/GPU."""
    out = []
    for run in RUNS:
        if run.fp8_recipe is None or run.value(TOKENS) is None or CLUSTERS.get(run.gpu) in (None, "grand-teton"):
            continue
        try:
            out.append(evaluate_run(run))
        except ValueError as err:
            out.append({"key": run.key, "skipped": str(err)})
    return out


def _summary(values: list[float]) -> dict[str, float | None]:
    logs = [abs(math.log(v)) for v in values if v]
    return {"median_abs_ln_ratio": statistics.median(logs) if logs else None,
            "worst_abs_ln_ratio": max(logs) if logs else None, "n": len(logs)}


def calibrate() -> dict[str, Any]:
    """Both tables and their median and worst ``|ln(predicted/published)|``."""
    pairs, absolute = pair_rows(), absolute_rows()
    return {
        "source": "benchmarks/calibration/published.py (helper research's cited runs)",
        "pairs": pairs, "pairs_summary": _summary([p["ratio"] for p in pairs if p.get("ratio")]),
        "absolute": absolute, "absolute_summary": _summary([r["ratio"] for r in absolute if r.get("ratio")]),
    }


def _gib(x: float | None) -> str:
    return "" if x is None else f"{x / 2**30:.1f}"


def _layout(r: dict[str, Any]) -> str:
    return (f"tp{r['tp']} pp{r['pp']}" + (f" v{r['vpp']}" if r["vpp"] > 1 else "") + (f" cp{r['cp']}" if r["cp"] > 1 else "")
            + f" dp{r['dp']}, b {r['mbs']}, m {r['m']}, {r['knobs']}")


def to_markdown(doc: dict[str, Any], command: str = "python -m benchmarks.calibration.fp8") -> str:
    ps, ab = doc["pairs_summary"], doc["absolute_summary"]

    def fmt(s: dict[str, Any]) -> str:
        if not s["n"]:
            return "no rows"
        return f"median |ln(predicted/published)| = {s['median_abs_ln_ratio']:.3f}, worst {s['worst_abs_ln_ratio']:.3f} (n = {s['n']})"

    lines = [
        "# Calibration: FP8 runs evaluated as published", "",
        f"Made by `{command}` (see its docstring for how a run is built). Runs from `benchmarks/calibration/published.py`; "
        "nothing tuned per row.", "",
        "## The same run in two precisions (FP8 speed-up predicted against published)", "",
        f"**{fmt(ps)}** of the speed-ups.", "",
        "| family | layout | base | run | predicted tok/s/GPU (base, run) | published | speed-up predicted | published | ratio | model memory GiB / usable |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in doc["pairs"]:
        if "skipped" in p:
            lines.append(f"| {p['family']} | | | | | | | | skipped: {p['skipped']} | |")
            continue
        b, r = p["base"], p["run"]
        pub = f"{b['published_tokens']:g}, {r['published_tokens']:g}" if r["published_tokens"] else ""
        pub_speedup = "" if p["published_speedup"] is None else f"{p['published_speedup']:.3f}"
        ratio = "" if p["ratio"] is None else f"{p['ratio']:.3f}"
        mem = f"{_gib(b['peak_memory_bytes'])}, {_gib(r['peak_memory_bytes'])} / {_gib(r['usable_memory_bytes'])}"
        lines.append(
            f"| {p['family'].removeprefix('precision:')} | {r['model']} {r['gpus']} x {r['gpu']}: {_layout(r)} | "
            f"{b['precision']} | {r['precision']} | {b['predicted_tokens']:.0f}, {r['predicted_tokens']:.0f} | {pub} | "
            f"{p['predicted_speedup']:.3f} | {pub_speedup} | {ratio} | {mem} |")
    lines += ["", "## FP8 runs on the presets' GPUs (absolute)", "", f"**{fmt(ab)}** of tokens/s/GPU.", "",
              "| run | model | GPUs | precision | layout | predicted tok/s/GPU | published | ratio | model memory GiB / usable |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in doc["absolute"]:
        if "skipped" in r:
            lines.append(f"| {r['key']} | | | | | | | skipped: {r['skipped']} | |")
            continue
        lines.append(f"| {r['key']} | {r['model']} | {r['gpus']} x {r['gpu']} | {r['precision']} | {_layout(r)} | "
                     f"{r['predicted_tokens']:.0f} | {r['published_tokens']:g} | {r['ratio']:.3f} | "
                     f"{_gib(r['peak_memory_bytes'])} / {_gib(r['usable_memory_bytes'])}{'' if r['fits'] else ' (over)'} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    doc = results_cli(argv, __doc__.splitlines()[0], "calibration_fp8", calibrate, to_markdown)
    for p in doc["pairs"]:
        if "skipped" not in p:
            pub = "" if p["published_speedup"] is None else f"{p['published_speedup']:.3f}"
            print(f"{p['run']['key']:>48}: speed-up predicted {p['predicted_speedup']:.3f}, published {pub}")
    print("pairs:", doc["pairs_summary"], "absolute:", doc["absolute_summary"])
    return doc


if __name__ == "__main__":
    main()
