"""Pipeline schedules: each device's op order, the stash it implies, and the iteration estimate.

One module says what a schedule *is*; :mod:`partitioner.simulate.engine` replays
the orders in time and :func:`partitioner.plan.objective_value` optimises
the estimates.

More (the detail of this module): ``docs/internals/plan.md``, section ``partitioner.plan.schedules``.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

__all__ = [
    "SCHEDULES",
    "SPLIT_BACKWARD",
    "device_order",
    "chunk_device",
    "held_counts",
    "held_states",
    "stash",
    "peak_activation_bytes",
    "estimate",
    "check_shape",
]

SCHEDULES = ("1f1b", "zb-h1", "interleaved", "gpipe", "forward")
SPLIT_BACKWARD = ("zb-h1",)  # schedules that run B and W as separate ops

OpKey = tuple[str, int, int]  # (kind, chunk, microbatch)


def chunk_device(chunk: int, num_devices: int) -> int:
    """The device group that runs ``chunk`` (chunk mod P)."""
    return chunk % num_devices


def check_shape(schedule: str, num_devices: int, microbatches: int, virtual_stages: int = 1) -> None:
    """Raise ValueError when the schedule cannot run P devices, m microbatches, v virtual stages."""
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    if schedule == "interleaved":
        if virtual_stages < 2:
            raise ValueError(f"the interleaved schedule needs virtual_stages >= 2, got {virtual_stages}")
        if microbatches % num_devices:
            raise ValueError(
                f"the interleaved schedule needs microbatches ({microbatches}) to be a multiple of the "
                f"{num_devices} pipeline stage groups"
            )
    elif virtual_stages != 1:
        raise ValueError(f"virtual stages are for the interleaved schedule only ({schedule!r} was given v = {virtual_stages})")


def device_order(schedule: str, device: int, num_devices: int, microbatches: int, virtual_stages: int = 1) -> list[OpKey]:
    """The ops ``(kind, chunk, microbatch)`` that ``device`` runs, in order (see the module docstring)."""
    check_shape(schedule, num_devices, microbatches, virtual_stages)
    m, P, p = microbatches, num_devices, device
    if schedule == "interleaved":
        return _interleaved(p, P, m, virtual_stages)
    forwards = [("F", p, j) for j in range(m)]
    if schedule == "forward":
        return forwards
    if schedule == "gpipe":
        return forwards + [("B", p, j) for j in reversed(range(m))]
    warmup = min(P - p - 1, m)
    if schedule == "1f1b":
        return _one_f_one_b(p, P, m, warmup)
    return _zb_h1(p, P, m, warmup)


def _zb_h1(p: int, P: int, m: int, warmup: int) -> list[OpKey]:
    """1F1B's F and B order; a W follows a B once the device has run min(P, m) forwards (it then
    holds P microbatches, as device 0 does); the W's left fill the tail.

    The B of steady pair i comes after warmup + i + 1 forwards, so the pairs from
    i = min(P, m) - warmup - 1 on and every cool-down B are followed by a W.
    """
    steady = m - warmup
    first = min(max(min(P, m) - warmup - 1, 0), steady)  # the first steady pair whose B a W follows
    late = steady - first
    head: list[OpKey] = [("F", p, 0)] * (2 * first)  # F, B
    head[0::2] = [("F", p, warmup + i) for i in range(first)]
    head[1::2] = [("B", p, i) for i in range(first)]
    body: list[OpKey] = [("F", p, 0)] * (3 * late)  # F, B, W
    body[0::3] = [("F", p, warmup + i) for i in range(first, steady)]
    body[1::3] = [("B", p, i) for i in range(first, steady)]
    body[2::3] = [("W", p, k) for k in range(late)]
    cool: list[OpKey] = [("F", p, 0)] * (2 * warmup)  # B, W
    cool[0::2] = [("B", p, j) for j in range(steady, m)]
    cool[1::2] = [("W", p, late + k) for k in range(warmup)]
    tail = [("W", p, j) for j in range(late + warmup, m)]
    return [("F", p, j) for j in range(warmup)] + head + body + cool + tail


def _one_f_one_b(p: int, P: int, m: int, warmup: int) -> list[OpKey]:
    """``warmup`` forwards, then F, B pairs until the forwards run out, then the remaining backwards."""
    steady: list[OpKey] = [("F", p, 0)] * (2 * (m - warmup))  # steady state: one forward, one backward
    steady[0::2] = [("F", p, warmup + j) for j in range(m - warmup)]
    steady[1::2] = [("B", p, j) for j in range(m - warmup)]
    return [("F", p, j) for j in range(warmup)] + steady + [("B", p, j) for j in range(m - warmup, m)]  # cool-down


def _interleaved(p: int, P: int, m: int, v: int) -> list[OpKey]:
    """Megatron-LM's interleaved 1F1B on device ``p`` (chunks are global: local chunk k is k·P + p)."""
    total = m * v
    warmup = total if m == P else min(2 * (P - p - 1) + (v - 1) * P, total)

    def op(kind: str, k: int) -> OpKey:
        local = (k % (P * v)) // P
        if kind == "B":
            local = v - 1 - local
        return (kind, local * P + p, (k // (P * v)) * P + k % P)

    order = [op("F", k) for k in range(warmup)]
    for k in range(total - warmup):
        order += [op("F", k + warmup), op("B", k)]
    return order + [op("B", k) for k in range(total - warmup, total)]


def held_counts(schedule: str, device: int, num_devices: int, microbatches: int, virtual_stages: int = 1) -> list[dict[int, int]]:
    """Microbatches held per chunk of ``device`` after every F start and B end, in order.

    A microbatch is held on a chunk from the start of its F to the end of
    its B (module docstring, "Stash"). Depends on the order only.
    """
    P = num_devices
    held = {c: 0 for c in range(device, P * virtual_stages, P)}
    out = []
    for kind, chunk, _ in device_order(schedule, device, P, microbatches, virtual_stages):
        if kind in ("F", "B"):
            held[chunk] += 1 if kind == "F" else -1
            out.append(dict(held))
    return out


def stash(schedule: str, num_devices: int, microbatches: int, virtual_stages: int = 1) -> list[int]:
    """Peak microbatches whose activations each chunk holds at once, chunk order.

    1F1B and ZB-H1 give min(m, P - p); GPipe and ``forward`` m (a forward-only
    run frees nothing): closed forms, equal to :func:`walked_stash` (tested).
    ``interleaved`` is counted by walking its order.
    """
    P, m = num_devices, microbatches
    if schedule in ("1f1b", "zb-h1"):
        return [min(m, P - p) for p in range(P)]
    if schedule in ("gpipe", "forward"):
        return [m] * P
    return walked_stash(schedule, num_devices, microbatches, virtual_stages)


@lru_cache(maxsize=4096)
def held_states(schedule: str, device: int, num_devices: int, microbatches: int, virtual_stages: int = 1) -> tuple[tuple[int, ...], ...]:
    """The distinct states of :func:`held_counts` (per chunk of ``device``, chunk order), in order of first appearance.

    Every peak over time of a quantity that grows with the held counts (a
    stash, held activation bytes) is a max over these few states; they
    depend on the order only and are cached. The counts are running sums
    of +1 (an F) and -1 (a B) per chunk, taken with numpy.
    """
    check_shape(schedule, num_devices, microbatches, virtual_stages)
    if schedule == "interleaved":
        step, slot = _interleaved_steps(device, num_devices, microbatches, virtual_stages)
    else:
        order = device_order(schedule, device, num_devices, microbatches, virtual_stages)
        step = np.array([1 if kind == "F" else -1 for kind, _, _ in order if kind != "W"], dtype=np.int64)
        slot = np.zeros(len(step), dtype=np.int64)  # one chunk: the device's stage
    if not len(step):
        return ()
    held = np.zeros((len(step), virtual_stages), dtype=np.int64)
    held[np.arange(len(step)), slot] = step
    np.cumsum(held, axis=0, out=held)
    low, base = held.min(), int(held.max() - held.min()) + 1
    if base ** virtual_stages >= 2**62:  # too many to number as one int64 per state: compare rows
        return tuple(dict.fromkeys(map(tuple, held.tolist())))
    codes = (held - low) @ (base ** np.arange(virtual_stages, dtype=np.int64))  # one number per state
    _, first = np.unique(codes, return_index=True)
    return tuple(tuple(row) for row in held[np.sort(first)].tolist())


def _interleaved_steps(p: int, P: int, m: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_interleaved`'s order on device ``p`` as arrays: +1 per F, -1 per B, and the op's local chunk (0..v-1)."""
    total = m * v
    warmup = total if m == P else min(2 * (P - p - 1) + (v - 1) * P, total)
    k = np.arange(total)
    steady = total - warmup
    pairs = np.empty(2 * steady, dtype=np.int64)
    pairs[0::2], pairs[1::2] = k[warmup:], k[:steady]  # F(k + warm-up), B(k)
    ks = np.concatenate([k[:warmup], pairs, k[steady:]])
    step = np.concatenate([np.ones(warmup, np.int64), np.tile(np.array([1, -1], np.int64), steady), -np.ones(warmup, np.int64)])
    local = (ks % (P * v)) // P
    return step, np.where(step > 0, local, v - 1 - local)


def walked_stash(schedule: str, num_devices: int, microbatches: int, virtual_stages: int = 1) -> list[int]:
    """:func:`stash` by walking every device's op order (:func:`held_states`), for any schedule."""
    return list(_walked_stash(schedule, num_devices, microbatches, virtual_stages))


@lru_cache(maxsize=1024)
def _walked_stash(schedule: str, num_devices: int, microbatches: int, virtual_stages: int) -> tuple[int, ...]:
    P = num_devices
    peak = [0] * (P * virtual_stages)
    for p in range(P):
        for held in held_states(schedule, p, P, microbatches, virtual_stages):
            for c, n in zip(range(p, P * virtual_stages, P), held):
                peak[c] = max(peak[c], n)
    return tuple(peak)


def peak_activation_bytes(
    schedule: str, device: int, num_devices: int, microbatches: int, act_bytes: Sequence[int], virtual_stages: int = 1
) -> int:
    """The most activation bytes ``device`` holds at once: max over time of sum_c held_c x act_bytes[c].

    ``act_bytes`` is per chunk (chunk order). With one chunk per device it is
    stash x act_bytes; with v chunks it is at most the sum of the chunks'
    stash x act_bytes (their peaks need not coincide).
    """
    chunks = range(device, num_devices * virtual_stages, num_devices)
    states = held_states(schedule, device, num_devices, microbatches, virtual_stages)
    return max((sum(n * act_bytes[c] for c, n in zip(chunks, held)) for held in states), default=0)


def estimate(
    schedule: str,
    times: Sequence[float],
    microbatches: int,
    *,
    wgrad: Sequence[float] | None = None,
    fwd: Sequence[float] | None = None,
    virtual_stages: int = 1,
) -> float:
    """The iteration estimate of ``schedule`` (module docstring) from per-stage times.

    Parameters
    ----------
    schedule : str
        One of :data:`SCHEDULES`.
    times : sequence of float
        t_c = F_c + B_c per stage (per chunk under ``interleaved``, chunk order).
    microbatches : int
    wgrad : sequence of float, optional
        W_c, needed by ``zb-h1``.
    fwd : sequence of float, optional
        F_c, needed by ``gpipe`` and ``forward``.
    virtual_stages : int
        v for ``interleaved`` (len(times) = P·v).

    Returns
    -------
    float
    """
    m, t = microbatches, list(times)
    if schedule == "1f1b":
        return sum(t) + (m - 1) * max(t)
    if schedule in ("gpipe", "forward"):
        if fwd is None:
            raise ValueError(f"the {schedule} estimate needs the forward times")
        f = list(fwd)
        flow = sum(f) + (m - 1) * max(f)
        if schedule == "forward":
            return flow
        b = [x - y for x, y in zip(t, f)]
        return flow + sum(b) + (m - 1) * max(b)
    if schedule == "zb-h1":
        if wgrad is None:
            raise ValueError("the zb-h1 estimate needs the weight-gradient times W")
        k = max(m - len(t) + 1, 1)  # the W's of the bottleneck that do not hide in its bubble
        u = [x - w for x, w in zip(t, wgrad)]
        return sum(u) + max((m - 1) * uc + k * w for uc, w in zip(u, wgrad))
    if schedule == "interleaved":
        v = virtual_stages
        if v < 1 or len(t) % v:
            raise ValueError(f"{len(t)} chunks do not split into groups of {v} virtual stages")
        P = len(t) // v
        groups = [sum(t[g::P]) for g in range(P)]
        return sum(groups) / v + (m - 1 / v) * max(groups)
    raise ValueError(f"unknown schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
