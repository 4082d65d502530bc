"""The framework tier: the plans every framework test runs, built by our own planner.

``PLANS`` are the issue's six plans (pi0, openvla-7b, llava-1.5-7b,
qwen2-vl-72b, internvl-1.5-26b, and a ``balanced`` internvl plan with
vision-only stages), pinned to 1F1B, and three plans pinned to interleaved
1F1B (v = 2, 4) and GPipe, planned by :func:`partitioner.plan_model` at sizes
small enough to plan in seconds on 2 cores (fixed m and a stage cap where
the full ``auto`` search takes minutes). The tests need the ``frameworks``
extra (``pip install -e '.[frameworks]'``); without it they skip, saying so.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Any

from partitioner import plan_model

NOT_INSTALLED = "the frameworks extra is not installed (pip install -e '.[frameworks]')"


@dataclass(frozen=True)
class PlanCase:
    id: str
    model: str
    cluster: str
    nodes: int
    global_batch: int
    microbatches: int
    method: str = "dp"
    max_stages: int | None = None
    schedule: str = "1f1b"  # pinned: the tier checks each schedule's export on purpose, not what auto picks
    virtual_stages: int | None = None
    target: str = "any"
    precision: str | None = None
    fp8_recipe: str | None = None

    def command(self) -> str:
        extra = f" --method {self.method}" if self.method != "dp" else ""
        extra += f" --max-stages {self.max_stages}" if self.max_stages else ""
        extra += f" --schedule {self.schedule}"
        extra += f" --virtual-stages {self.virtual_stages}" if self.virtual_stages else ""
        extra += f" --target {self.target}" if self.target != "any" else ""
        extra += f" --precision {self.precision}" if self.precision else ""
        extra += f" --fp8-recipe {self.fp8_recipe}" if self.fp8_recipe else ""
        return (f"partitioner plan --model {self.model} --cluster {self.cluster} --nodes {self.nodes} "
                f"--global-batch {self.global_batch} --microbatches {self.microbatches}{extra} --json")


PLANS = [
    PlanCase("pi0", "pi0", "dgx-h100", 2, 1024, 32),
    PlanCase("openvla-7b", "openvla-7b", "dgx-a100-80g", 4, 1024, 32, max_stages=6),
    PlanCase("llava-1.5-7b", "llava-1.5-7b", "dgx-h100", 2, 512, 64),
    PlanCase("qwen2-vl-72b", "qwen2-vl-72b", "dgx-h100", 4, 256, 32, max_stages=6),
    PlanCase("internvl-1.5-26b", "internvl-1.5-26b", "dgx-h100", 4, 512, 64, max_stages=8),
    PlanCase("internvl-balanced", "internvl-1.5-26b", "dgx-h100", 4, 512, 128, method="balanced"),
    # plans kept under interleaved 1F1B (Megatron's uniform split with virtual stages) and GPipe
    PlanCase("llava-interleaved-v2", "llava-1.5-7b", "dgx-h100", 2, 512, 64, method="greedy", schedule="interleaved",
             virtual_stages=2),
    PlanCase("qwen2-vl-7b-interleaved-v4", "qwen2-vl-7b", "dgx-h100", 2, 256, 32, method="greedy", schedule="interleaved",
             virtual_stages=4),
    PlanCase("seed-vla-gpipe", "seed-vla-8gpu", "dgx-h100", 1, 32, 8, method="greedy", schedule="gpipe"),
    # planned for torchtitan: its one mesh (pi0's best plan under `any` gives one layer another mesh)
    PlanCase("pi0-torchtitan", "pi0", "dgx-h100", 2, 1024, 32, target="torchtitan"),
    # FP8 (issue 34): Megatron's tensorwise on Hopper, MXFP8 on Blackwell, torchtitan's rowwise
    PlanCase("llava-fp8-megatron", "llava-1.5-7b", "dgx-h100", 2, 512, 64, target="megatron", precision="fp8"),
    PlanCase("llava-mxfp8-b200", "llava-1.5-7b", "dgx-b200", 1, 256, 32, precision="fp8", fp8_recipe="mxfp8"),
    PlanCase("llava-rowwise-torchtitan", "llava-1.5-7b", "dgx-h100", 2, 512, 64, target="torchtitan", precision="fp8",
             fp8_recipe="rowwise"),
]
PLAN_IDS = [c.id for c in PLANS]
_CACHE: dict[str, Any] = {}


def planned(case_id: str):
    """The :class:`SolveResult` of one plan case (planned once per session)."""
    if case_id not in _CACHE:
        case = next(c for c in PLANS if c.id == case_id)
        result = plan_model(case.model, case.cluster, nodes=case.nodes, global_batch=case.global_batch,
                            microbatches=case.microbatches, method=case.method, max_stages=case.max_stages,
                            schedule=case.schedule, virtual_stages=case.virtual_stages, target=case.target,
                            precision=case.precision, fp8_recipe=case.fp8_recipe)
        assert result.plan is not None, f"{case.command()}: {result.status}: {result.message}"
        _CACHE[case_id] = result
    return _CACHE[case_id]




def free_port() -> int:
    """A free TCP port on localhost (for a gloo rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _short(reasons) -> str:
    """The reasons without their parenthesized details, each cut at 120 characters."""
    import re

    out = []
    for r in reasons:
        r = re.sub(r" \([^()]*\)", "", r)
        out.append(r if len(r) <= 120 else r[:117] + "...")
    return "; ".join(out)


if __name__ == "__main__":  # python -m tests.frameworks.plans: the plan x framework table of docs/export.md
    from partitioner.frameworks.export import TARGETS, export_result

    print("| plan (`" + "partitioner plan ...`) | stages (dp x tp) | " + " | ".join(TARGETS) + " |")
    print("|---|---|" + "---|" * len(TARGETS))
    for case in PLANS:
        result = planned(case.id)
        shape = ", ".join(f"{s.dp}x{s.tp}" for s in result.plan.stages)
        cells = []
        for target in TARGETS:
            exp = export_result(result, target)
            path = exp.settings.get("path")
            cells.append(("runs" + (f" ({path})" if path else "")) if exp.expressible else "not expressible: " + _short(exp.reasons))
        print(f"| {case.id}: `{case.command().replace('partitioner plan ', '')}` | {shape} | " + " | ".join(cells) + " |")
