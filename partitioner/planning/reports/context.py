"""``plan``'s context-parallel section: per stage, what its cp > 1 segments cost and hold.

:func:`context_report` sums, over the layers of each stage segment that
runs cp > 1, the cost model's context-parallel terms
(:func:`~partitioner.costs.axes.report.cp_breakdown`): the attention core's
time on the rank's sequence share, the exposed context-parallel traffic,
the activation bytes per microbatch at that cp and the transient KV
buffers. :class:`CpStage` is one stage's record (the result's optional
``context_parallel`` section); None when no stage runs cp > 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...costs import CostOptions, model_layers
from ...costs.axes.report import CpBreakdown, cp_breakdown
from ...costs.variants import parse_variant
from ...plan import Plan
from ...presets import ClusterSpec, ModelSpec
from ...problem import Problem

__all__ = ["CpStage", "context_report"]


@dataclass(frozen=True)
class CpStage:
    """One stage's context-parallel terms over its cp > 1 segments (``layers``: from the first such layer to the
    last), per microbatch on one of its GPUs (ms; bytes)."""

    stage: int
    layers: tuple[int, int]
    cp: int
    algorithm: str
    terms: CpBreakdown

    def to_dict(self) -> dict[str, Any]:
        t = self.terms
        return {"stage": self.stage, "layers": list(self.layers), "cp": self.cp, "algorithm": self.algorithm,
                "attention_fwd_ms": t.attention_fwd_ms, "attention_bwd_ms": t.attention_bwd_ms,
                "comm_exposed_fwd_ms": t.comm_fwd_ms, "comm_exposed_bwd_ms": t.comm_bwd_ms,
                "activation_bytes": int(round(t.act_bytes)), "kv_buffer_bytes": int(round(t.buffer_bytes))}

    def text(self) -> str:
        t = self.terms
        return (f"stage {self.stage} (layers {self.layers[0]}-{self.layers[1]}): cp {self.cp} ({self.algorithm or '-'}), "
                f"attention {t.attention_fwd_ms:.2f} + {t.attention_bwd_ms:.2f} ms (F + B), cp traffic exposed "
                f"{t.comm_fwd_ms:.2f} + {t.comm_bwd_ms:.2f} ms, activations {t.act_bytes / 2**30:.2f} GiB per microbatch, "
                f"KV buffers {t.buffer_bytes / 2**20:.0f} MiB while a layer runs")


def context_report(spec: ModelSpec, cluster: ClusterSpec, problem: Problem, plan: Plan) -> tuple[CpStage, ...] | None:
    """Per stage with a cp > 1 segment, its :class:`CpStage` (summed over those segments); None when no stage
    runs cp > 1, or the problem's layers are not the model's (a profile or a foreign problem)."""
    work = problem.workload
    if not any(c.cp > 1 for s in plan.stages for _, c in s.segment_configs(problem)):
        return None
    opts = CostOptions.from_mapping(work.cost_options or {})
    layers = model_layers(spec, opts)
    if [layer.name for layer in layers] != [layer.name for layer in problem.layers]:
        return None
    mb = work.microbatch_size
    out: list[CpStage] = []
    for index, stage in enumerate(plan.stages):
        segs = [(ab, c) for ab, c in stage.segment_configs(problem) if c.cp > 1]
        if not segs:
            continue
        total = CpBreakdown()
        for (a, b), config in segs:
            recompute = parse_variant(config.variant).recompute
            for k in range(a, b + 1):
                total = total + cp_breakdown(layers[k], config, mb / config.dp, recompute, cluster, opts)
        cps = sorted({c.cp for _, c in segs})
        out.append(CpStage(index, (segs[0][0][0], segs[-1][0][1]), cps[-1], total.algorithm, total))
    return tuple(out)
