"""Pictures of a simulated iteration: a Gantt chart and a Chrome-trace JSON.

* :func:`gantt` draws one row per stage (device group; stage 0 on top), forwards,
backwards and (``zb-h1``) weight-gradient ops in three colours with the microbatch
number in each box, idle time as the grey band behind them, and the makespan and
bubble in the title. Under ``interleaved`` a device's v chunks are told apart by
shade (its first chunk darkest) and the legend names them. :func:`save_gantt` writes
it as PNG, SVG or PDF (by suffix). A stage with several segments in different
configs (format v2) has its boxes split into sub-bars
(:mod:`partitioner.simulate.breakdown`): the segments in alternating shades of the
op's colour, the reshards between them hatched, in the order the op runs them (the
backward reversed); its row label names each segment's module and config.

More (the detail of this module): ``docs/internals/simulate.md``, section ``partitioner.simulate.viz``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .breakdown import backward_order
from .engine import Op, Simulation

__all__ = ["gantt", "save_gantt", "chrome_trace", "write_trace", "IMAGE_FORMATS"]

IMAGE_FORMATS = ("png", "svg", "pdf")
FORWARD_COLOR = "#4C72B0"
BACKWARD_COLOR = "#DD8452"
WEIGHT_GRAD_COLOR = "#55A868"
IDLE_COLOR = "#E6E6E6"
RESHARD_COLOR = "#6B6B6B"
PART_KINDS = ("F", "B", "W")  # ops drawn with their segments: forward, backward (input part), weight gradients
US_PER_MS = 1000.0


def _labels(sim: Simulation) -> list[str]:
    return list(sim.stage_labels) if sim.stage_labels else [f"stage {p}" for p in range(sim.num_stages)]


def gantt(sim: Simulation, title: str | None = None, *, width: float = 12.0):
    """Draw the timeline of ``sim``.

    Parameters
    ----------
    sim : Simulation
    title : str, optional
        First title line; the second always states schedule, m, makespan and bubble.
    width : float
        Figure width in inches.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    P, span = sim.num_stages, sim.makespan_ms
    fig = Figure(figsize=(width, 1.4 + 0.55 * P), layout="constrained")
    ax = fig.subplots()
    height = 0.8
    # the row's grey band is the idle time that the boxes leave uncovered
    ax.barh(range(P), [span] * P, left=0, height=height, color=IDLE_COLOR, edgecolor="none", zorder=1)
    split = _split_stages(sim)
    zero_bubble = _has_weight_ops(sim)
    for op in sim.timeline:
        color = _op_color(sim, op)
        ax.barh(op.stage, op.duration, left=op.start, height=height, color=color, edgecolor="white", linewidth=0.6, zorder=2)
        if _chunk(op) in split and op.kind in PART_KINDS:
            _draw_parts(ax, op, split[_chunk(op)], color, height, zero_bubble)
    ax.set_yticks(range(P), _labels(sim))
    ax.set_ylim(P - 0.5, -0.5)  # stage 0 on top
    ax.set_xlim(0, span if span > 0 else 1.0)
    ax.set_xlabel("time (ms)")
    ax.tick_params(axis="y", length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    summary = (
        f"{sim.schedule}, m = {sim.microbatches}: makespan {span:.2f} ms, "
        f"bubble {100 * sim.bubble_ratio:.1f} %"
    )
    ax.set_title(f"{title}\n{summary}" if title else summary, loc="left")
    handles = [Patch(color=color, label=label) for label, color in _legend(sim)]
    if split:
        handles.append(Patch(color=_tint(FORWARD_COLOR), label="2nd, 4th, ... segment"))
    if any(part.kind == "reshard" and part.fwd_ms > 0 for parts in split.values() for part in parts):
        handles.append(Patch(facecolor="white", edgecolor=RESHARD_COLOR, hatch="////", label="reshard"))
    handles.append(Patch(color=IDLE_COLOR, label="idle"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    _number_boxes(fig, ax, sim)
    return fig


def _chunk(op: Op) -> int:
    """The stage (chunk, under ``interleaved``) whose parts ``op`` runs."""
    return op.chunk if op.chunk is not None else op.stage


def _local_chunk(sim: Simulation, op: Op) -> int:
    """Which of its device's v chunks ``op`` runs (0 for the first)."""
    return _chunk(op) // sim.num_stages


def _shade(color: str, local_chunk: int, virtual_stages: int):
    """``color`` mixed towards white for later chunks of a device (the first keeps it)."""
    if virtual_stages <= 1 or local_chunk == 0:
        return color
    return _tint(color, 0.55 * local_chunk / (virtual_stages - 1))


def _op_color(sim: Simulation, op: Op):
    base = {"F": FORWARD_COLOR, "B": BACKWARD_COLOR, "W": WEIGHT_GRAD_COLOR}[op.kind]
    return _shade(base, _local_chunk(sim, op), sim.virtual_stages)


def _legend(sim: Simulation) -> list[tuple[str, Any]]:
    """``(label, colour)`` of every kind of op box the chart can hold."""
    kinds = [("forward", FORWARD_COLOR)]
    if sim.schedule == "zb-h1":
        kinds += [("backward (input grad)", BACKWARD_COLOR), ("weight grad", WEIGHT_GRAD_COLOR)]
    elif sim.schedule != "forward":
        kinds.append(("backward", BACKWARD_COLOR))
    if sim.virtual_stages <= 1:
        return kinds
    return [
        (f"{label}, chunk {k + 1}/{sim.virtual_stages}", _shade(color, k, sim.virtual_stages))
        for label, color in kinds
        for k in range(sim.virtual_stages)
    ]


def _split_stages(sim: Simulation) -> dict[int, tuple]:
    """The stages (chunks) whose boxes get sub-bars: those with more than one segment."""
    if not sim.stage_parts:
        return {}
    return {
        p: parts
        for p, parts in enumerate(sim.stage_parts)
        if sum(1 for part in parts if part.kind == "segment") > 1
    }


def _has_weight_ops(sim: Simulation) -> bool:
    """Whether the schedule runs weight gradients as ops of their own (``W``): then ``B`` is the input part."""
    return any(op.kind == "W" for op in sim.timeline)


def _draw_parts(ax, op, parts, color: str, height: float, split_backward: bool = False) -> None:
    """Overlay ``op``'s segments (alternating shades) and hatched reshards, scaled to the op's duration.

    The parts are drawn in the order the op runs them; their lengths are the
    stage's F_p (or B_p) pieces scaled to the op's duration, so a schedule
    that stretches or splits an op still shows the proportions.
    """
    # shade by the segment's place in the stage (forward order), so a segment looks the same in F and B
    position = {id(part): k for k, part in enumerate(p for p in parts if p.kind == "segment")}
    for part, left, width in _part_spans(op, parts, split_backward):
        if part.kind == "segment":
            shade = color if position[id(part)] % 2 == 0 else _tint(color)
            ax.barh(op.stage, width, left=left, height=height, color=shade, edgecolor="white", linewidth=0.4, zorder=2.1)
        elif part.kind == "reshard" and width > 0:
            ax.barh(op.stage, width, left=left, height=height, color="white", edgecolor=RESHARD_COLOR,
                    hatch="////", linewidth=0.4, zorder=2.2)


def _part_spans(op, parts, split_backward: bool = False) -> list[tuple]:
    """``(part, left, width)`` for the parts of ``op`` in the order it runs them, scaled to its duration.

    ``F`` runs the segments in order, ``B`` and ``W`` in reverse;
    ``split_backward`` says that ``B`` holds only the input gradients (the
    schedule has ``W`` ops).
    """
    ordered = parts if op.kind == "F" else backward_order(parts)
    lengths = [part.op_ms(op.kind, split_backward) for part in ordered]
    total = sum(lengths)
    if total <= 0 or op.duration <= 0:
        return []
    out, left = [], op.start
    for part, length in zip(ordered, lengths):
        width = length * op.duration / total
        out.append((part, left, width))
        left += width
    return out


def _number_spot(op, split: dict, split_backward: bool = False) -> tuple[float, float]:
    """Where the microbatch number goes: ``(centre, room)``; in a split box, the longest segment."""
    if _chunk(op) in split and op.kind in PART_KINDS:
        spans = [
            (width, left)
            for part, left, width in _part_spans(op, split[_chunk(op)], split_backward)
            if part.kind == "segment"
        ]
        if spans:
            width, left = max(spans)
            return left + width / 2, width
    return op.start + op.duration / 2, op.duration


def _tint(color: str, amount: float = 0.4) -> tuple[float, float, float]:
    """``color`` mixed with white: the shade of every second segment."""
    from matplotlib.colors import to_rgb

    r, g, b = to_rgb(color)
    return r + (1.0 - r) * amount, g + (1.0 - g) * amount, b + (1.0 - b) * amount


def _number_boxes(fig, ax, sim: Simulation) -> None:
    """Write the microbatch number in every box wide enough to hold it."""
    fig.draw_without_rendering()  # settle the layout to learn how wide 1 ms is on the page
    x0, x1 = ax.get_xlim()
    pts_per_ms = ax.get_window_extent().width * 72.0 / fig.dpi / (x1 - x0)
    split = _split_stages(sim)
    zero_bubble = _has_weight_ops(sim)
    for op in sim.timeline:
        text = str(op.microbatch)
        centre, room = _number_spot(op, split, zero_bubble)
        # a digit is about 0.6 em wide; keep a little margin on both sides
        fontsize = min(9.0, room * pts_per_ms / (0.62 * len(text) + 0.5))
        if fontsize >= 5.5:
            ax.text(centre, op.stage, text, ha="center", va="center", color="white", fontsize=fontsize, zorder=3)


def save_gantt(sim: Simulation, path: str | Path, title: str | None = None, *, dpi: int = 150) -> Path:
    """Write the Gantt chart; the format (png, svg, pdf) comes from the suffix."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"{path}: the picture's suffix must be one of {', '.join('.' + f for f in IMAGE_FORMATS)}")
    fig = gantt(sim, title)
    fig.savefig(path, format=fmt, dpi=dpi)
    return path


def chrome_trace(sim: Simulation, title: str | None = None) -> dict[str, Any]:
    """The Trace Event Format document of ``sim`` (times in microseconds)."""
    pid = 0
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": title or f"pipeline ({sim.schedule})"}},
    ]
    for p, label in enumerate(_labels(sim)):
        events.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": p, "args": {"name": label}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": p, "args": {"sort_index": p}})
    split = _split_stages(sim)
    zero_bubble = _has_weight_ops(sim)
    for op in sim.timeline:
        events.append(_trace_op(sim, op, pid))
        if _chunk(op) in split and op.kind in PART_KINDS:
            # a stage with several segments: its segments and reshards as slices nested in the op
            for part, left, width in _part_spans(op, split[_chunk(op)], zero_bubble):
                if part.kind == "send" or width <= 0:
                    continue
                events.append(
                    {
                        "ph": "X",
                        "name": part.label,
                        "cat": part.kind,
                        "pid": pid,
                        "tid": op.stage,
                        "ts": left * US_PER_MS,
                        "dur": width * US_PER_MS,
                        "args": {"stage": op.stage, "microbatch": op.microbatch, "ms": width},
                    }
                )
    has_memory = sim.weight_bytes is not None and sim.act_bytes is not None
    for p in range(sim.num_stages):
        if has_memory:
            name, key, profile = f"memory stage {p}", "bytes", sim.memory_profile(p)
        else:
            name, key, profile = f"in-flight stage {p}", "microbatches", [(0.0, 0)] + sim.inflight_profile(p)
        # several changes at one instant: keep the last, so each timestamp has one value
        last_at = {t: value for t, value in profile}
        for t, value in sorted(last_at.items()):
            events.append({"ph": "C", "name": name, "pid": pid, "tid": p, "ts": t * US_PER_MS, "args": {key: value}})
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "schedule": sim.schedule,
            "microbatches": sim.microbatches,
            "makespan_ms": sim.makespan_ms,
            "bubble_ratio": sim.bubble_ratio,
            "virtual_stages": sim.virtual_stages,
        },
    }


def _trace_op(sim: Simulation, op: Op, pid: int) -> dict[str, Any]:
    """One op as a complete event; B and W (and chunks) apart."""
    chunked = sim.virtual_stages > 1
    args: dict[str, Any] = {"stage": op.stage, "microbatch": op.microbatch, "ms": op.duration}
    if chunked:
        args["chunk"] = op.chunk
    return {
        "ph": "X",
        "name": f"{op.kind}{op.microbatch}" + (f" c{op.chunk}" if chunked else ""),
        "cat": {"F": "forward", "B": "backward", "W": "weight-gradient"}[op.kind],
        "pid": pid,
        "tid": op.stage,
        "ts": op.start * US_PER_MS,
        "dur": op.duration * US_PER_MS,
        "args": args,
    }


def write_trace(sim: Simulation, path: str | Path, title: str | None = None) -> Path:
    """Write :func:`chrome_trace` as JSON to ``path``."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(sim, title)) + "\n", encoding="utf-8")
    return path
