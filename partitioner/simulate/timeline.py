"""The times of a replay's ops: the event loop that lists the timeline, and the same times without it.

A device (row) p runs the ops ``(kind, chunk, microbatch)`` of its order
(:func:`partitioner.plan.schedules.device_order`) one at a time; an op starts as
soon as its device is free and its dependency (DESIGN.md, "1F1B simulator
semantics": F after the previous chunk's F, B after the next chunk's B or
the last chunk's own F, W after its B) has ended. :func:`run` processes the
completions in time order and lists every op as it starts (the timeline of
:class:`partitioner.simulate.engine.Simulation`); :func:`op_times` gives each
device's ``(start, end)`` pairs, bit for bit the same, by working the
devices forward as far as their dependencies are known (no events, no ops
built), for the figures a replay reports (:func:`partitioner.simulate.engine.replay_check`).
"""
from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["Op", "run", "op_times", "bubble_ratio"]


@dataclass(frozen=True)
class Op:
    """One op of the timeline on device row ``stage``.

    ``kind`` is ``"F"`` (forward), ``"B"`` (backward; its input-gradient part
    under ``zb-h1``) or ``"W"`` (weight gradient); ``chunk`` is the model
    chunk in pipeline order (the stage itself unless the schedule is
    ``interleaved``). Times in ms.
    """

    stage: int
    kind: str
    microbatch: int
    start: float
    end: float
    chunk: int | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        doc = {"stage": self.stage, "op": self.kind, "microbatch": self.microbatch, "start": self.start, "end": self.end}
        if self.chunk is not None:
            doc["chunk"] = self.chunk
        return doc


def _dependency(kind: str, chunk: int, microbatch: int, num_chunks: int) -> tuple[str, int, int] | None:
    """The op that must end before ``(kind, chunk, microbatch)`` may start (None: none)."""
    if kind == "F":
        return ("F", chunk - 1, microbatch) if chunk > 0 else None
    if kind == "W":
        return ("B", chunk, microbatch)
    if chunk < num_chunks - 1:
        return ("B", chunk + 1, microbatch)
    return ("F", chunk, microbatch)


def run(orders: list[list[tuple[str, int, int]]], durations: dict[str, tuple[float, ...]], num_chunks: int) -> tuple[Op, ...]:
    """Event loop: pop op completions in time order; after each, start whatever became ready.

    At a completion time ``t`` a device that is idle and whose next op's
    dependency has ended starts that op at ``t``; since completions are
    processed in time order, ``t`` is exactly max(device free, dependency end).
    """
    P = len(orders)
    ended: dict[tuple[str, int, int], float] = {}
    position = [0] * P
    running = [False] * P
    events: list[tuple[float, int, int, str, int, int]] = []  # (end, seq, device, kind, chunk, microbatch)
    timeline: list[Op] = []
    seq = 0

    def try_start(p: int, now: float) -> None:
        nonlocal seq
        if running[p] or position[p] == len(orders[p]):
            return
        kind, c, j = orders[p][position[p]]
        dep = _dependency(kind, c, j, num_chunks)
        if dep is not None and dep not in ended:
            return  # retried when the dependency ends
        duration = durations[kind][c]
        running[p] = True
        position[p] += 1
        timeline.append(Op(p, kind, j, now, now + duration, c))
        heapq.heappush(events, (now + duration, seq, p, kind, c, j))
        seq += 1

    for p in range(P):
        try_start(p, 0.0)
    while events:
        now, _, p, kind, c, j = heapq.heappop(events)
        ended[(kind, c, j)] = now
        running[p] = False
        # the device itself, and the devices of the neighbouring chunks whose next op may wait on this one
        for q in dict.fromkeys((p, (c + 1) % P, (c - 1) % P)):
            try_start(q, now)
    stuck = [p for p in range(P) if position[p] < len(orders[p])]
    if stuck:  # cannot happen for the built-in schedules; guards custom orders
        raise RuntimeError(f"the schedule deadlocks: stages {stuck} never finish")
    return tuple(timeline)


def op_times(orders: list[list[tuple[str, int, int]]], durations: dict[str, tuple[float, ...]], num_chunks: int,
              microbatches: int) -> list[list[tuple[float, float]]]:
    """Per device, ``(start, end)`` of each op of its order: the times :func:`run` gives, without its event loop.

    An op starts at max(its device's previous end, its dependency's end),
    the moment :func:`run` processes the later of those two completions;
    a device's ops are worked out as far as their dependencies are known,
    and a device is looked at again when a neighbour (the devices of the
    chunks next to its chunks) has advanced. Same RuntimeError on a deadlock.
    """
    P, C = len(orders), num_chunks
    ends: dict[str, list[list[float | None]]] = {kind: [[None] * microbatches for _ in range(C)] for kind in durations}
    end_f, end_b = ends["F"], ends["B"]
    times: list[list[tuple[float, float]]] = [[] for _ in range(P)]
    position, free = [0] * P, [0.0] * P
    queue, queued = deque(range(P)), [True] * P
    while queue:
        p = queue.popleft()
        queued[p] = False
        order, k, t, out = orders[p], position[p], free[p], times[p]
        while k < len(order):
            kind, c, j = order[k]
            if kind == "F":
                dep = end_f[c - 1][j] if c > 0 else 0.0
            elif kind == "B":
                dep = end_b[c + 1][j] if c < C - 1 else end_f[c][j]
            else:
                dep = end_b[c][j]
            if dep is None:
                break
            start = t if t >= dep else dep
            t = start + durations[kind][c]
            ends[kind][c][j] = t
            out.append((start, t))
            k += 1
        if k > position[p]:
            position[p], free[p] = k, t
            for q in ((p + 1) % P, (p - 1) % P):
                if not queued[q]:
                    queued[q] = True
                    queue.append(q)
    stuck = [p for p in range(P) if position[p] < len(orders[p])]
    if stuck:  # cannot happen for the built-in schedules; guards custom orders
        raise RuntimeError(f"the schedule deadlocks: stages {stuck} never finish")
    return times


def bubble_ratio(schedule: str, microbatches: int, fwd: Sequence[float], bwd: Sequence[float], num_stages: int,
                  span: float) -> float:
    """:attr:`~.engine.Simulation.bubble_ratio` from the chunk times and the makespan."""
    if span <= 0:
        return 0.0
    per_mb = fwd if schedule == "forward" else [f + b for f, b in zip(fwd, bwd)]
    return 1.0 - microbatches * sum(per_mb) / (num_stages * span)
