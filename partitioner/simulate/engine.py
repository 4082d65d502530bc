"""Discrete-event replay of one training iteration of a pipeline plan.

Each stage (chunk) c runs a forward op F(c, j) and a backward op B(c, j)
for every microbatch j = 0..m-1, with the durations F_c and B_c of
DESIGN.md (compute plus the sends, as :func:`partitioner.plan.evaluate`
defines them). Under ``zb-h1`` the backward is split into B(c, j), the
input gradient (B_c - W_c), and W(c, j), the weight gradient (W_c). Under
``interleaved`` the P·v chunks run on P device groups, chunk c on group
c mod P. The dependencies are those of pipeline parallelism:

* F(c, j) after F(c-1, j)  (the activations arrive from the previous chunk);
* B(c, j) after B(c+1, j)  (the gradients arrive from the next chunk); on the
last chunk B(c, j) after its own F(c, j); * W(c, j) after B(c, j).

More (the detail of this module): ``docs/internals/simulate.md``, section ``partitioner.simulate.engine``.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Sequence

from ..core.limits import MAX_REPLAY_OPS
from ..plan import Evaluation, Plan, as_plan, evaluate
from ..plan.schedules import SCHEDULES, SPLIT_BACKWARD, check_shape, device_order, held_states
from ..problem import Problem, ProblemError, as_problem
from .breakdown import stage_parts
from .timeline import Op, bubble_ratio, op_times, run

__all__ = [
    "SCHEDULES",
    "Op",
    "Simulation",
    "device_order",
    "simulate_times",
    "simulate",
    "replay_check",
    "ReplaySummary",
]

KINDS = {"F": "forward", "B": "backward", "W": "weight gradient"}


@dataclass(frozen=True)
class Simulation:
    """The replay of one iteration: timeline and the figures derived from it.

    ``fwd_ms``, ``bwd_ms``, ``wgrad_ms``, ``weight_bytes`` and ``act_bytes``
    are per chunk (per stage unless ``virtual_stages`` > 1); the figures are
    per device row. ``bwd_ms`` is the whole backward and ``wgrad_ms`` (zb-h1)
    its weight-gradient part. ``weight_bytes`` and ``act_bytes`` are known
    when the simulation comes from a plan; then ``peak_memory_bytes`` is
    reported.
    """

    schedule: str
    microbatches: int
    fwd_ms: tuple[float, ...]
    bwd_ms: tuple[float, ...]
    timeline: tuple[Op, ...]
    weight_bytes: tuple[int, ...] | None = None
    act_bytes: tuple[int, ...] | None = None
    stage_labels: tuple[str, ...] | None = None
    wgrad_ms: tuple[float, ...] | None = None
    virtual_stages: int = 1
    # per stage (chunk), what its ops are made of (segments, reshards, send): set by simulate() for pictures
    stage_parts: tuple | None = field(default=None, compare=False)

    @property
    def num_chunks(self) -> int:
        return len(self.fwd_ms)

    @property
    def num_stages(self) -> int:
        """Device rows: P (the chunks over the virtual stages)."""
        return len(self.fwd_ms) // self.virtual_stages

    def chunks(self, stage: int) -> range:
        """The chunks that run on device row ``stage``."""
        return range(stage, self.num_chunks, self.num_stages)

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
        """``1 - sum busy / (P * makespan)``: m·sum(F + B) of work per device (``forward``: m·sum F)."""
        return bubble_ratio(self.schedule, self.microbatches, self.fwd_ms, self.bwd_ms, self.num_stages, self.makespan_ms)

    def ops(self, stage: int) -> list[Op]:
        """The ops of one device row in the order they ran (the timeline lists ops in start order)."""
        return [op for op in self.timeline if op.stage == stage]

    def _held(self, stage: int) -> list[tuple[float, dict[int, int]]]:
        """``(time, held microbatches per chunk)`` after every change on ``stage``."""
        held = {c: 0 for c in self.chunks(stage)}
        out = []
        for op in self.ops(stage):
            c = op.chunk if op.chunk is not None else op.stage
            if op.kind == "F":
                held[c] += 1
                out.append((op.start, dict(held)))
            elif op.kind == "B":
                held[c] -= 1
                out.append((op.end, dict(held)))
        return out

    def inflight_profile(self, stage: int) -> list[tuple[float, int]]:
        """``(time, microbatches held)`` after every change on ``stage``, summed over its chunks.

        A microbatch is held from the start of its forward to the end of its
        backward. DESIGN counts in-flight microbatches as forwards done minus
        backwards done, so in the ``forward`` schedule (no backwards) a stage
        ends up holding all m.
        """
        return [(t, sum(h.values())) for t, h in self._held(stage)]

    @property
    def peak_inflight(self) -> tuple[int, ...]:
        return tuple(max((n for _, n in self.inflight_profile(p)), default=0) for p in range(self.num_stages))

    @property
    def peak_inflight_chunks(self) -> tuple[int, ...]:
        """Per chunk: the most microbatches it holds at once (:func:`partitioner.plan.schedules.stash`)."""
        peak = [0] * self.num_chunks
        for p in range(self.num_stages):
            for _, held in self._held(p):
                for c, n in held.items():
                    peak[c] = max(peak[c], n)
        return tuple(peak)

    @property
    def peak_pending_weight_grads(self) -> tuple[int, ...]:
        """Per device: the most microbatches whose B has ended and W has not (0 unless ``zb-h1``)."""
        out = []
        for p in range(self.num_stages):
            pending = peak = 0
            for op in self.ops(p):
                if self.schedule in SPLIT_BACKWARD and op.kind == "B":
                    pending += 1
                    peak = max(peak, pending)
                elif op.kind == "W":
                    pending -= 1
            out.append(peak)
        return tuple(out)

    def memory_profile(self, stage: int) -> list[tuple[float, int]]:
        """``(time, bytes)`` on ``stage``: its chunks' weights plus held microbatches times activations."""
        if self.weight_bytes is None or self.act_bytes is None:
            raise ValueError("this simulation has no memory figures (simulate a plan, or pass weight_bytes/act_bytes)")
        chunks = self.chunks(stage)
        w = sum(self.weight_bytes[c] for c in chunks)
        return [(0.0, w)] + [(t, w + sum(n * self.act_bytes[c] for c, n in held.items())) for t, held in self._held(stage)]

    @property
    def peak_memory_bytes(self) -> tuple[int, ...] | None:
        if self.weight_bytes is None or self.act_bytes is None:
            return None
        return tuple(max(b for _, b in self.memory_profile(p)) for p in range(self.num_stages))

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
        if self.schedule in SPLIT_BACKWARD:
            doc["wgrad_ms"] = list(self.wgrad_ms or ())
            doc["peak_pending_weight_grads"] = list(self.peak_pending_weight_grads)
        if self.virtual_stages > 1:
            doc["virtual_stages"] = self.virtual_stages
            doc["peak_inflight_chunks"] = list(self.peak_inflight_chunks)
        if timeline:
            doc["timeline"] = [op.to_dict() for op in self.timeline]
        return doc


# --------------------------------------------------------------------------- raw times


def _check_times(name: str, values: Sequence[float]) -> tuple[float, ...]:
    out: list[float] = []
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
    wgrad_ms: Sequence[float] | None = None,
    virtual_stages: int = 1,
    weight_bytes: Sequence[int] | None = None,
    act_bytes: Sequence[int] | None = None,
    stage_labels: Sequence[str] | None = None,
) -> Simulation:
    """Simulate one iteration from raw per-stage (per-chunk) times.

    Parameters
    ----------
    fwd_ms, bwd_ms : sequence of float
        F_c and B_c per microbatch (ms), sends included, one per stage, or per
        chunk in pipeline order under ``interleaved`` (P·v entries). ``bwd_ms``
        is the whole backward; it may be omitted for the ``forward`` schedule
        (and is zero otherwise).
    microbatches : int
        m >= 1 (a multiple of P under ``interleaved``).
    schedule : {"1f1b", "zb-h1", "interleaved", "gpipe", "forward"}
    wgrad_ms : sequence of float, optional
        W_c <= B_c, the weight-gradient part of the backward, run as its own
        op under ``zb-h1``; an even split (B_c / 2) when omitted, as in the
        problem format. Other schedules run the whole backward as one op.
    virtual_stages : int
        v (>= 2 for ``interleaved``, 1 otherwise).
    weight_bytes, act_bytes : sequence of int, optional
        Per stage (chunk), for the peak-memory figures.
    stage_labels : sequence of str, optional
        Names of the P device rows for the pictures.

    Returns
    -------
    Simulation
    """
    r = _prepare(fwd_ms, bwd_ms, microbatches, schedule, wgrad_ms=wgrad_ms, virtual_stages=virtual_stages,
                 weight_bytes=weight_bytes, act_bytes=act_bytes, stage_labels=stage_labels)
    return Simulation(
        schedule=r.schedule,
        microbatches=r.microbatches,
        fwd_ms=r.fwd,
        bwd_ms=r.bwd,
        timeline=run(r.orders(), r.durations, len(r.fwd)),
        weight_bytes=r.weight_bytes,
        act_bytes=r.act_bytes,
        stage_labels=r.labels,
        wgrad_ms=r.wgrad,
        virtual_stages=r.virtual_stages,
    )


class _Replay(NamedTuple):
    """What :func:`simulate_times` checked and derived from its arguments, before any replay."""

    schedule: str
    microbatches: int
    virtual_stages: int
    fwd: tuple[float, ...]
    bwd: tuple[float, ...]
    wgrad: tuple[float, ...] | None
    durations: dict[str, tuple[float, ...]]  # per op kind, per chunk
    weight_bytes: tuple[int, ...] | None
    act_bytes: tuple[int, ...] | None
    labels: tuple[str, ...] | None

    @property
    def num_stages(self) -> int:
        return len(self.fwd) // self.virtual_stages

    def orders(self) -> list[list[tuple[str, int, int]]]:
        return [device_order(self.schedule, p, self.num_stages, self.microbatches, self.virtual_stages)
                for p in range(self.num_stages)]


def _prepare(
    fwd_ms: Sequence[float],
    bwd_ms: Sequence[float] | None,
    microbatches: int,
    schedule: str,
    *,
    wgrad_ms: Sequence[float] | None,
    virtual_stages: int,
    weight_bytes: Sequence[int] | None,
    act_bytes: Sequence[int] | None,
    stage_labels: Sequence[str] | None,
) -> _Replay:
    """:func:`simulate_times`'s checks (ValueError naming the argument) and the op durations."""
    fwd = _check_times("fwd_ms", fwd_ms)
    C = len(fwd)
    if C == 0:
        raise ValueError("need at least one stage")
    bwd = _check_times("bwd_ms", bwd_ms) if bwd_ms is not None else (0.0,) * C
    if len(bwd) != C:
        raise ValueError(f"fwd_ms has {C} stages but bwd_ms has {len(bwd)}")
    if isinstance(microbatches, bool) or not isinstance(microbatches, numbers.Integral) or microbatches < 1:
        raise ValueError(f"microbatches must be an integer >= 1, got {microbatches!r}")
    if isinstance(virtual_stages, bool) or not isinstance(virtual_stages, numbers.Integral) or virtual_stages < 1:
        raise ValueError(f"virtual_stages must be an integer >= 1, got {virtual_stages!r}")
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    v = int(virtual_stages)
    if C % v:
        raise ValueError(f"{C} chunks do not split into {v} virtual stages per device")
    P, microbatches = C // v, int(microbatches)
    check_shape(schedule, P, microbatches, v)
    wgrad = None
    if schedule in SPLIT_BACKWARD:
        wgrad = _check_times("wgrad_ms", wgrad_ms) if wgrad_ms is not None else tuple(b / 2 for b in bwd)
        if len(wgrad) != C:
            raise ValueError(f"fwd_ms has {C} stages but wgrad_ms has {len(wgrad)}")
        for c, (w, b) in enumerate(zip(wgrad, bwd)):
            if w > b * (1 + 1e-12):
                raise ValueError(f"wgrad_ms[{c}] = {w} exceeds the whole backward bwd_ms[{c}] = {b}")
    memory = []
    for name, values in (("weight_bytes", weight_bytes), ("act_bytes", act_bytes)):
        if values is not None and len(values) != C:
            raise ValueError(f"{name} has {len(values)} entries for {C} stages")
        memory.append(tuple(int(x) for x in values) if values is not None else None)
    if stage_labels is not None and len(stage_labels) != P:
        raise ValueError(f"stage_labels has {len(stage_labels)} entries for {P} stages")

    durations = {"F": fwd, "B": bwd if wgrad is None else tuple(max(0.0, b - w) for b, w in zip(bwd, wgrad))}
    if wgrad is not None:
        durations["W"] = wgrad
    return _Replay(schedule, microbatches, v, fwd, bwd, wgrad, durations, memory[0], memory[1],
                   tuple(stage_labels) if stage_labels is not None else None)


def _figures(r: _Replay) -> dict[str, Any]:
    """The figures of ``Simulation`` (``makespan_ms``, ``bubble_ratio``, ``busy_ms``, ``peak_inflight``,
    ``peak_memory_bytes``) of the replay ``r``, equal to those of :func:`simulate_times`'s timeline (tested).

    Times from :func:`~partitioner.simulate.timeline.op_times`, a device's busy time summed op by op in its
    order as the timeline lists them; the held microbatches depend on the
    order only (:func:`partitioner.plan.schedules.held_states`).
    """
    P, C = r.num_stages, len(r.fwd)
    times = op_times(r.orders(), r.durations, C, r.microbatches)
    busy = []
    for ops in times:
        total = 0.0
        for start, end in ops:
            total += end - start
        busy.append(total)
    span = max((ops[-1][1] for ops in times if ops), default=0.0)  # a device's ends never decrease
    states = [held_states(r.schedule, p, P, r.microbatches, r.virtual_stages) for p in range(P)]
    peak_memory = None
    if r.weight_bytes is not None and r.act_bytes is not None:
        peak_memory = []
        for p in range(P):
            chunks = range(p, C, P)
            w = sum(r.weight_bytes[c] for c in chunks)
            peak_memory.append(max([w] + [w + sum(n * r.act_bytes[c] for c, n in zip(chunks, held)) for held in states[p]]))
    return {
        "makespan_ms": span,
        "bubble_ratio": bubble_ratio(r.schedule, r.microbatches, r.fwd, r.bwd, P, span),
        "busy_ms": busy,
        "peak_inflight": [max((sum(held) for held in states[p]), default=0) for p in range(P)],
        "peak_memory_bytes": peak_memory,
    }


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


def _group_label(problem: Problem, chunks: Sequence[Any]) -> str:
    """A device group's row under ``interleaved``: its chunks and their layers."""
    head = chunks[0]
    parts = [f"{c.first_layer}" if c.first_layer == c.last_layer else f"{c.first_layer}-{c.last_layer}" for c in chunks]
    return (
        f"group {head.index}: chunks {', '.join(str(c.index) for c in chunks)} (layers {', '.join(parts)}), "
        f"{head.devices} GPU {head.layout.key}"
    )


def simulate(
    problem: Problem, plan: Plan, schedule: str | None = None, *, evaluation: Evaluation | None = None
) -> Simulation:
    """Replay ``plan`` for one iteration of ``problem``.

    Parameters
    ----------
    problem : Problem
    plan : Plan
    schedule : {"1f1b", "zb-h1", "interleaved", "gpipe", "forward"}, optional
        Defaults to the problem's ``training.schedule``. A plan of an
        ``interleaved`` problem (P·v chunks) replays under ``interleaved``
        only; any other plan under any schedule but ``interleaved``.
    evaluation : Evaluation, optional
        ``evaluate(problem, plan)`` if already computed.

    Returns
    -------
    Simulation
        With per-device memory figures (weights and activations from the
        plan); under ``zb-h1`` W_p is the stage's weight-gradient compute
        (:meth:`partitioner.problem.LayerCost.split`).

    Raises
    ------
    partitioner.plan.PlanError
        When the plan breaks a validity rule.
    ValueError
        For a schedule the plan cannot run.
    partitioner.problem.ProblemError
        When ``problem`` or ``plan`` is not of an accepted kind (a Problem, a
        dict or a path; a Plan, a result, a dict or a path), or the replay
        would exceed :data:`~partitioner.core.limits.MAX_REPLAY_OPS` operations.
    """
    problem, ev, inputs = _plan_inputs(problem, plan, schedule, evaluation)
    v = ev.virtual_stages
    P = len(ev.stages) // v
    labels = (
        [_group_label(problem, ev.stages[g::P]) for g in range(P)] if v > 1 else [_label(problem, s) for s in ev.stages]
    )
    sim = simulate_times(**inputs, stage_labels=labels)
    return replace(sim, stage_parts=stage_parts(problem, ev))


def _plan_inputs(problem: Problem, plan: Plan, schedule: str | None,
                 evaluation: Evaluation | None) -> tuple[Problem, Evaluation, dict[str, Any]]:
    """:func:`simulate`'s checks (same errors) and the :func:`simulate_times` arguments of the plan but its labels."""
    problem, plan = as_problem(problem), as_plan(plan)
    schedule = schedule or problem.training.schedule
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    ops = 2 * problem.microbatches * plan.num_stages
    if ops > MAX_REPLAY_OPS:
        raise ProblemError(
            f"replaying {problem.microbatches} microbatches on {plan.num_stages} stages takes {ops} operations, "
            f"more than the {MAX_REPLAY_OPS} the simulator runs (see the resource limits in docs/limits.md)",
            path="training.microbatches",
            source=problem.source,
        )
    ev = evaluation if evaluation is not None else evaluate(problem, plan)
    v = ev.virtual_stages
    if (schedule == "interleaved") != (v > 1):
        if v > 1:
            raise ValueError(f"this plan has {len(ev.stages)} chunks on {len(ev.stages) // v} device groups: it replays under 'interleaved' only")
        raise ValueError("the interleaved schedule replays a plan of an interleaved problem (training.virtual_stages >= 2)")
    # F_p and B_p are evaluate's: compute, the v2 intra-stage reshards and the sends
    inputs = dict(
        fwd_ms=[s.fwd_ms for s in ev.stages],
        bwd_ms=[s.bwd_ms for s in ev.stages],
        microbatches=problem.microbatches,
        schedule=schedule,
        wgrad_ms=[s.wgrad_ms for s in ev.stages] if schedule in SPLIT_BACKWARD else None,
        virtual_stages=v,
        weight_bytes=[s.weight_bytes for s in ev.stages],
        act_bytes=[s.act_bytes for s in ev.stages],
    )
    return problem, ev, inputs


@dataclass(frozen=True)
class ReplaySummary:
    """The figures of one replay that a result reports (its ``simulation`` section, :meth:`to_dict`).

    ``busy_ms``, ``peak_inflight`` and ``peak_memory_bytes`` are per
    pipeline rank; ``fits_memory`` says every rank's simulated peak is within
    ``gpu_memory_bytes``; ``iteration_estimate_ms`` is the schedule's
    estimate the solvers optimise (1F1B's the Alpa-style one), to read
    beside the simulated ``makespan_ms``.
    """

    schedule: str
    makespan_ms: float
    bubble_ratio: float
    busy_ms: tuple[float, ...]
    peak_inflight: tuple[int, ...]
    peak_memory_bytes: tuple[int, ...]
    fits_memory: bool
    iteration_estimate_ms: float

    @property
    def peak_bytes(self) -> int | None:
        """The largest rank's simulated peak (None without memory figures)."""
        return max(self.peak_memory_bytes) if self.peak_memory_bytes else None

    def to_dict(self) -> dict[str, Any]:
        return {"schedule": self.schedule, "makespan_ms": self.makespan_ms, "bubble_ratio": self.bubble_ratio,
                "busy_ms": list(self.busy_ms), "peak_inflight": list(self.peak_inflight),
                "peak_memory_bytes": list(self.peak_memory_bytes), "fits_memory": self.fits_memory,
                "iteration_estimate_ms": self.iteration_estimate_ms}


def replay_check(problem: Problem, plan: Plan, evaluation: Evaluation) -> ReplaySummary:
    """What ``solve(..., validate=True)`` attaches: the replay of a solver's plan under the problem's schedule."""
    problem, _, inputs = _plan_inputs(problem, plan, None, evaluation)
    figures = _figures(_prepare(**inputs, stage_labels=None))  # simulate()'s figures, without its timeline
    peak = tuple(figures["peak_memory_bytes"] or ())
    capacity = problem.cluster.gpu_memory_bytes
    return ReplaySummary(schedule=inputs["schedule"], makespan_ms=figures["makespan_ms"],
                         bubble_ratio=figures["bubble_ratio"], busy_ms=tuple(figures["busy_ms"]),
                         peak_inflight=tuple(figures["peak_inflight"]), peak_memory_bytes=peak,
                         fits_memory=all(b <= capacity for b in peak), iteration_estimate_ms=evaluation.iteration_ms)
