"""Discrete-event replay of one training iteration of a pipeline plan.

Each stage p runs a forward op F(p, j) and a backward op B(p, j) for every
microbatch j = 0..m-1, with the durations F_p and B_p of DESIGN.md (compute
plus the sends, as :func:`partitioner.plan.evaluate` defines them). The
dependencies are those of pipeline parallelism:

* F(p, j) after F(p-1, j)  (the activations arrive from the previous stage);
* B(p, j) after B(p+1, j)  (the gradients arrive from the next stage); on the
  last stage B(P-1, j) after its own F(P-1, j).

Every stage runs its ops one at a time in a fixed order given by the
schedule, and an op starts as soon as its stage is free and its dependency
has ended (DESIGN.md, "1F1B simulator semantics"):

``1f1b``
    w = min(P-p-1, m) warm-up forwards, then alternate one forward and one
    backward until the forwards run out, then the remaining backwards
    (PipeDream-Flush / Megatron-LM's non-interleaved schedule [1]_, [2]_).
``gpipe``
    all forwards, then all backwards [3]_. The backwards run in *reverse*
    microbatch order (m-1 first), as in GPipe's figure 2: the last
    microbatch is the one whose forward the last stage has just finished.
    For equal stages the makespan is the same as in order.
``forward``
    forwards only, every stage taking the microbatches in order: the flow
    shop of seed lesson 16 (``simulate_1f1b_execution``); B_p is ignored.

Reported figures:

* makespan: the end of the last op;
* bubble ratio: ``1 - m * sum_p (F_p + B_p) / (P * makespan)`` (``forward``:
  ``1 - m * sum_p F_p / (P * makespan)``), the idle share of the P stages;
* peak in-flight microbatches per stage: the most microbatches whose
  activations the stage holds at once, DESIGN's "forwards done minus
  backwards done". A microbatch is held from the start of its forward to the
  end of its backward, so 1F1B gives min(m, P-p) and GPipe m; ``forward``
  frees nothing and also gives m (the flow shop models time, not memory);
* peak memory per stage: ``weights + peak in-flight * activations``.

For P equal stages the 1F1B and GPipe makespans are ``(m + P - 1)(F + B)``
and the bubble ``(P - 1) / (m + P - 1)``; the tests check these closed forms
and, on random stage times, the bounds ``max_p m t_p <= makespan <= m sum_p t_p``.

References
----------
.. [1] D. Narayanan et al., "PipeDream: generalized pipeline parallelism for
   DNN training", SOSP 2019.
.. [2] D. Narayanan et al., "Efficient large-scale language model training on
   GPU clusters using Megatron-LM", SC 2021.
.. [3] Y. Huang et al., "GPipe: efficient training of giant neural networks
   using pipeline parallelism", NeurIPS 2019.
"""
from __future__ import annotations

import heapq
import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

from .breakdown import stage_parts
from .plan import Evaluation, Plan, evaluate
from .problem import Problem

__all__ = [
    "SCHEDULES",
    "Op",
    "Simulation",
    "stage_order",
    "simulate_times",
    "simulate",
    "replay_check",
]

SCHEDULES = ("1f1b", "gpipe", "forward")


@dataclass(frozen=True)
class Op:
    """One op of the timeline: ``kind`` is ``"F"`` (forward) or ``"B"`` (backward); times in ms."""

    stage: int
    kind: str
    microbatch: int
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "op": self.kind, "microbatch": self.microbatch, "start": self.start, "end": self.end}


@dataclass(frozen=True)
class Simulation:
    """The replay of one iteration: timeline and the figures derived from it.

    ``weight_bytes`` and ``act_bytes`` (per stage) are known when the
    simulation comes from a plan; then ``peak_memory_bytes`` is reported.
    """

    schedule: str
    microbatches: int
    fwd_ms: tuple[float, ...]
    bwd_ms: tuple[float, ...]
    timeline: tuple[Op, ...]
    weight_bytes: tuple[int, ...] | None = None
    act_bytes: tuple[int, ...] | None = None
    stage_labels: tuple[str, ...] | None = None
    # per stage, what its ops are made of (segments, reshards, send): set by simulate() for pictures
    stage_parts: tuple | None = field(default=None, compare=False)

    @property
    def num_stages(self) -> int:
        return len(self.fwd_ms)

    @property
    def makespan_ms(self) -> float:
        return max((op.end for op in self.timeline), default=0.0)

    @property
    def busy_ms(self) -> tuple[float, ...]:
        busy = [0.0] * self.num_stages
        for op in self.timeline:
            busy[op.stage] += op.duration
        return tuple(busy)

    @property
    def idle_ms(self) -> tuple[float, ...]:
        span = self.makespan_ms
        return tuple(span - b for b in self.busy_ms)

    @property
    def bubble_ratio(self) -> float:
        """``1 - m * sum_p t_p / (P * makespan)`` with t_p = F_p + B_p (``forward``: F_p)."""
        span = self.makespan_ms
        if span <= 0:
            return 0.0
        per_mb = self.fwd_ms if self.schedule == "forward" else [f + b for f, b in zip(self.fwd_ms, self.bwd_ms)]
        return 1.0 - self.microbatches * sum(per_mb) / (self.num_stages * span)

    def ops(self, stage: int) -> list[Op]:
        """The ops of one stage in the order they ran (the timeline lists ops in start order)."""
        return [op for op in self.timeline if op.stage == stage]

    def inflight_profile(self, stage: int) -> list[tuple[float, int]]:
        """``(time, microbatches held)`` after every change on ``stage``.

        A microbatch is held from the start of its forward to the end of its
        backward. DESIGN counts in-flight microbatches as forwards done minus
        backwards done, so in the ``forward`` schedule (no backwards) a stage
        ends up holding all m.
        """
        held, out = 0, []
        for op in self.ops(stage):
            if op.kind == "F":
                held += 1
                out.append((op.start, held))
            else:
                held -= 1
                out.append((op.end, held))
        return out

    @property
    def peak_inflight(self) -> tuple[int, ...]:
        return tuple(max((n for _, n in self.inflight_profile(p)), default=0) for p in range(self.num_stages))

    def memory_profile(self, stage: int) -> list[tuple[float, int]]:
        """``(time, bytes)`` on ``stage``: weights plus held microbatches times activations."""
        if self.weight_bytes is None or self.act_bytes is None:
            raise ValueError("this simulation has no memory figures (simulate a plan, or pass weight_bytes/act_bytes)")
        w, a = self.weight_bytes[stage], self.act_bytes[stage]
        return [(0.0, w)] + [(t, w + n * a) for t, n in self.inflight_profile(stage)]

    @property
    def peak_memory_bytes(self) -> tuple[int, ...] | None:
        if self.weight_bytes is None or self.act_bytes is None:
            return None
        return tuple(w + n * a for w, n, a in zip(self.weight_bytes, self.peak_inflight, self.act_bytes))

    def to_dict(self, timeline: bool = False) -> dict[str, Any]:
        """The ``simulate --json`` document; ``timeline=True`` adds every op."""
        peak_memory = self.peak_memory_bytes
        doc: dict[str, Any] = {
            "schedule": self.schedule,
            "microbatches": self.microbatches,
            "makespan_ms": self.makespan_ms,
            "bubble_ratio": self.bubble_ratio,
            "busy_ms": list(self.busy_ms),
            "peak_inflight": list(self.peak_inflight),
            "peak_memory_bytes": list(peak_memory) if peak_memory is not None else None,
            "fwd_ms": list(self.fwd_ms),
            "bwd_ms": list(self.bwd_ms),
        }
        if timeline:
            doc["timeline"] = [op.to_dict() for op in self.timeline]
        return doc


# --------------------------------------------------------------------------- schedules


def stage_order(schedule: str, stage: int, num_stages: int, microbatches: int) -> list[tuple[str, int]]:
    """The order of ``(kind, microbatch)`` ops that ``stage`` runs under ``schedule``."""
    m, P, p = microbatches, num_stages, stage
    forwards = [("F", j) for j in range(m)]
    if schedule == "forward":
        return forwards
    if schedule == "gpipe":
        return forwards + [("B", j) for j in reversed(range(m))]
    if schedule == "1f1b":
        warmup = min(P - p - 1, m)
        order = forwards[:warmup]
        for j in range(m - warmup):  # steady state: one forward, one backward
            order += [("F", warmup + j), ("B", j)]
        order += [("B", j) for j in range(m - warmup, m)]  # cool-down
        return order
    raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")


# --------------------------------------------------------------------------- the event loop


def _check_times(name: str, values: Sequence[float]) -> tuple[float, ...]:
    out = []
    for p, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name}[{p}] must be a finite number >= 0, got {v!r}")
        out.append(float(v))
    return tuple(out)


def simulate_times(
    fwd_ms: Sequence[float],
    bwd_ms: Sequence[float] | None = None,
    microbatches: int = 1,
    schedule: str = "1f1b",
    *,
    weight_bytes: Sequence[int] | None = None,
    act_bytes: Sequence[int] | None = None,
    stage_labels: Sequence[str] | None = None,
) -> Simulation:
    """Simulate one iteration from raw per-stage times.

    Parameters
    ----------
    fwd_ms, bwd_ms : sequence of float
        F_p and B_p per microbatch (ms), sends included. ``bwd_ms`` may be
        omitted for the ``forward`` schedule (and is zero otherwise).
    microbatches : int
        m >= 1.
    schedule : {"1f1b", "gpipe", "forward"}
    weight_bytes, act_bytes : sequence of int, optional
        Per stage, for the peak-memory figures.
    stage_labels : sequence of str, optional
        Names for the pictures.

    Returns
    -------
    Simulation
    """
    fwd = _check_times("fwd_ms", fwd_ms)
    P = len(fwd)
    if P == 0:
        raise ValueError("need at least one stage")
    bwd = _check_times("bwd_ms", bwd_ms) if bwd_ms is not None else (0.0,) * P
    if len(bwd) != P:
        raise ValueError(f"fwd_ms has {P} stages but bwd_ms has {len(bwd)}")
    if isinstance(microbatches, bool) or not isinstance(microbatches, numbers.Integral) or microbatches < 1:
        raise ValueError(f"microbatches must be an integer >= 1, got {microbatches!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    memory = []
    for name, values in (("weight_bytes", weight_bytes), ("act_bytes", act_bytes)):
        if values is not None and len(values) != P:
            raise ValueError(f"{name} has {len(values)} entries for {P} stages")
        memory.append(tuple(int(v) for v in values) if values is not None else None)
    if stage_labels is not None and len(stage_labels) != P:
        raise ValueError(f"stage_labels has {len(stage_labels)} entries for {P} stages")

    microbatches = int(microbatches)
    orders = [stage_order(schedule, p, P, microbatches) for p in range(P)]
    timeline = _run(orders, fwd, bwd)
    return Simulation(
        schedule=schedule,
        microbatches=microbatches,
        fwd_ms=fwd,
        bwd_ms=bwd,
        timeline=timeline,
        weight_bytes=memory[0],
        act_bytes=memory[1],
        stage_labels=tuple(stage_labels) if stage_labels is not None else None,
    )


def _dependency(kind: str, stage: int, microbatch: int, num_stages: int) -> tuple[str, int, int] | None:
    """The op that must end before ``(kind, stage, microbatch)`` may start (None: none)."""
    if kind == "F":
        return ("F", stage - 1, microbatch) if stage > 0 else None
    if stage < num_stages - 1:
        return ("B", stage + 1, microbatch)
    return ("F", stage, microbatch)


def _run(orders: list[list[tuple[str, int]]], fwd: tuple[float, ...], bwd: tuple[float, ...]) -> tuple[Op, ...]:
    """Event loop: pop op completions in time order; after each, start whatever became ready.

    At a completion time ``t`` a stage that is idle and whose next op's
    dependency has ended starts that op at ``t``; since completions are
    processed in time order, ``t`` is exactly max(stage free, dependency end).
    """
    P = len(orders)
    ended: dict[tuple[str, int, int], float] = {}
    position = [0] * P
    running = [False] * P
    events: list[tuple[float, int, int, str, int]] = []  # (end, seq, stage, kind, microbatch)
    timeline: list[Op] = []
    seq = 0

    def try_start(p: int, now: float) -> None:
        nonlocal seq
        if running[p] or position[p] == len(orders[p]):
            return
        kind, j = orders[p][position[p]]
        dep = _dependency(kind, p, j, P)
        if dep is not None and dep not in ended:
            return  # retried when the dependency ends
        duration = fwd[p] if kind == "F" else bwd[p]
        running[p] = True
        position[p] += 1
        timeline.append(Op(p, kind, j, now, now + duration))
        heapq.heappush(events, (now + duration, seq, p, kind, j))
        seq += 1

    for p in range(P):
        try_start(p, 0.0)
    while events:
        now, _, p, kind, j = heapq.heappop(events)
        ended[(kind, p, j)] = now
        running[p] = False
        # the stage itself, and the neighbours whose next op may wait on this one
        for q in (p, p + 1, p - 1):
            if 0 <= q < P:
                try_start(q, now)
    stuck = [p for p in range(P) if position[p] < len(orders[p])]
    if stuck:  # cannot happen for the built-in schedules; guards custom orders
        raise RuntimeError(f"the schedule deadlocks: stages {stuck} never finish")
    return tuple(timeline)


# --------------------------------------------------------------------------- plans


def _label(problem: Problem, ev_stage: Any) -> str:
    """``stage p: layers a-b (modules), d GPU config``; with several configs, one ``module config`` per segment."""
    s = ev_stage
    layers = f"{s.first_layer}" if s.first_layer == s.last_layer else f"{s.first_layer}-{s.last_layer}"
    if len(set(s.configs)) > 1:
        parts = ", ".join(f"{problem.layers[a].module} {c.key}" for (a, _), c in zip(s.segments, s.configs))
        return f"stage {s.index}: layers {layers}, {s.devices} GPU: {parts}"
    names = {problem.layers[i].module for i in range(s.first_layer, s.last_layer + 1)}
    return f"stage {s.index}: layers {layers} ({'+'.join(sorted(names))}), {s.devices} GPU {s.layout.key}"


def simulate(problem: Problem, plan: Plan, schedule: str = "1f1b", *, evaluation: Evaluation | None = None) -> Simulation:
    """Replay ``plan`` for one iteration of ``problem``.

    Parameters
    ----------
    problem : Problem
    plan : Plan
    schedule : {"1f1b", "gpipe", "forward"}
    evaluation : Evaluation, optional
        ``evaluate(problem, plan)`` if already computed.

    Returns
    -------
    Simulation
        With per-stage memory figures (weights and activations from the plan).

    Raises
    ------
    partitioner.plan.PlanError
        When the plan breaks a validity rule.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    ev = evaluation if evaluation is not None else evaluate(problem, plan)
    # F_p and B_p are evaluate's: compute, the v2 intra-stage reshards and the sends
    sim = simulate_times(
        [s.fwd_ms for s in ev.stages],
        [s.bwd_ms for s in ev.stages],
        problem.microbatches,
        schedule,
        weight_bytes=[s.weight_bytes for s in ev.stages],
        act_bytes=[s.act_bytes for s in ev.stages],
        stage_labels=[_label(problem, s) for s in ev.stages],
    )
    return replace(sim, stage_parts=stage_parts(problem, ev))


def replay_check(problem: Problem, plan: Plan, evaluation: Evaluation) -> dict[str, Any]:
    """What ``solve(..., validate=True)`` attaches: the 1F1B replay of a solver's plan.

    Returns
    -------
    dict
        ``schedule``, ``makespan_ms``, ``bubble_ratio``, ``busy_ms``,
        ``peak_inflight``, ``peak_memory_bytes``, ``fits_memory`` (every
        stage's simulated peak within ``gpu_memory_bytes``) and
        ``iteration_estimate_ms`` (the plan's Alpa-style estimate, to read
        beside the simulated makespan).
    """
    sim = simulate(problem, plan, "1f1b", evaluation=evaluation)
    peak = list(sim.peak_memory_bytes or ())
    capacity = problem.cluster.gpu_memory_bytes
    return {
        "schedule": sim.schedule,
        "makespan_ms": sim.makespan_ms,
        "bubble_ratio": sim.bubble_ratio,
        "busy_ms": list(sim.busy_ms),
        "peak_inflight": list(sim.peak_inflight),
        "peak_memory_bytes": peak,
        "fits_memory": all(b <= capacity for b in peak),
        "iteration_estimate_ms": evaluation.iteration_ms,
    }
