"""What a stage's forward and backward op are made of: segments, reshards, sends.

Format v2 (``DESIGN.md``, "Times v2") runs a stage's segments one after the
other, each in its own config, with a reshard r between two segments whose
(dp, tp) differ, and ends the op with the send to the neighbour stage:

    forward   seg_1, r_1, seg_2, ..., seg_K, x_p          (F_p)
    backward  seg_K, r_{K-1}, ..., seg_1, x_{p-1}         (B_p)

:func:`stage_parts` lists these parts in forward order from an
:class:`~partitioner.plan.Evaluation`, with each part's forward and backward
milliseconds, so that pictures can show them (:mod:`partitioner.simulate.viz`); the
parts of a stage add up to its ``fwd_ms`` and ``bwd_ms``. A version-1 stage
is one segment and its send.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..plan import Evaluation
from ..problem import Problem

__all__ = ["StagePart", "stage_parts", "backward_order", "config_cell"]


@dataclass(frozen=True)
class StagePart:
    """One piece of a stage's ops.

    ``kind`` is ``"segment"`` (layers ``first..last`` of ``module`` in config
    ``config``), ``"reshard"`` (between the segments before and after it) or
    ``"send"`` (the forward's send to the next stage, whose ``bwd_ms`` is the
    backward's send to the previous stage). ``weight_ms`` is the part of
    ``bwd_ms`` that computes weight gradients (a segment's Σ W of
    :meth:`~partitioner.problem.LayerCost.split`; 0 for reshards and sends),
    for schedules that run it as a separate op (zero-bubble W).
    """

    kind: str
    label: str
    fwd_ms: float
    bwd_ms: float
    weight_ms: float = 0.0

    def op_ms(self, kind: str, split_backward: bool = False) -> float:
        """This part's share of an op of ``kind``: ``F``, ``B`` (its input-gradient part when
        ``split_backward``, i.e. when the schedule runs ``W`` ops of its own) or ``W``."""
        if kind == "F":
            return self.fwd_ms
        if kind == "W":
            return self.weight_ms
        return self.bwd_ms - self.weight_ms if split_backward else self.bwd_ms


def stage_parts(problem: Problem, evaluation: Evaluation) -> tuple[tuple[StagePart, ...], ...]:
    """Per stage, its parts in forward order (segments with reshards between them, then the send)."""
    out = []
    for s in evaluation.stages:
        parts: list[StagePart] = []
        pairs = list(zip(s.segments, s.configs)) or [((s.first_layer, s.last_layer), s.layout)]
        for k, ((a, b), config) in enumerate(pairs):
            if k:
                r = s.reshards_ms[k - 1]
                parts.append(StagePart("reshard", f"reshard {pairs[k - 1][1].key} -> {config.key}", r, r))
            costs = [problem.layers[i].costs[config] for i in range(a, b + 1)]
            module = problem.layers[a].module
            parts.append(
                StagePart(
                    "segment",
                    f"{module} {config.key}",
                    sum(c.fwd_ms for c in costs),
                    sum(c.bwd_ms for c in costs),
                    sum(c.split()[1] for c in costs),
                )
            )
        parts.append(StagePart("send", "send", s.send_fwd_ms, s.send_bwd_ms))
        out.append(tuple(parts))
    return tuple(out)


def backward_order(parts: tuple[StagePart, ...]) -> tuple[StagePart, ...]:
    """The parts in the order the backward runs them: segments reversed, the send last."""
    body = [p for p in parts if p.kind != "send"]
    return tuple(reversed(body)) + tuple(p for p in parts if p.kind == "send")


def config_cell(problem: Problem, stage) -> str:
    """A stage's configs for a table cell: ``8 x 1`` (v1), ``8 x 1 zero3`` with a variant,
    and one ``module dp x tp [variant]`` line per segment when the segments' configs differ;
    format v3 spells each config by its axes, ``dp2tp4cp2ep4 [variant]``.

    ``stage`` is a :class:`~partitioner.plan.StageEvaluation`.
    """
    configs = tuple(stage.configs) or (stage.layout,)

    def one(config) -> str:
        if problem.version >= 3:  # format v3: the canonical key's axes, e.g. dp2tp4cp2ep4
            return config.axes + (f" {config.variant}" if config.variant else "")
        return f"{config.dp} x {config.tp}" + (f" {config.variant}" if config.variant else "")

    if len(set(configs)) == 1:
        return one(configs[0])
    return "\n".join(f"{problem.layers[a].module} {one(c)}" for (a, _), c in zip(stage.segments, configs))
