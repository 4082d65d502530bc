"""Pictures of a simulated iteration: a Gantt chart and a Chrome-trace JSON.

* :func:`gantt` draws one row per stage (device group; stage 0 on top),
  forwards, backwards and (``zb-h1``) weight-gradient ops in three colours
  with the microbatch number in each box, idle time as the grey band behind
  them, and the makespan and bubble in the title. Under ``interleaved`` a
  device's v chunks are told apart by shade (its first chunk darkest) and
  the legend names them. :func:`save_gantt` writes it as PNG, SVG or PDF
  (by suffix).
* :func:`chrome_trace` builds the Trace Event Format document [1]_ that
  ``chrome://tracing`` and Perfetto (ui.perfetto.dev) open: one process
  ``pipeline``, one thread (track) per stage named by ``thread_name``
  metadata, every op a complete event (``ph: "X"``, ``ts``/``dur`` in
  microseconds; category ``forward``, ``backward`` or ``weight-gradient``,
  named ``F3``, ``B3``, ``W3``, with `` c5`` for chunk 5 under
  ``interleaved``) and, per stage, a counter track (``ph: "C"``) of the memory
  held (bytes; the held microbatch count when the simulation has no memory
  figures).

matplotlib is used through :class:`matplotlib.figure.Figure` directly, so no
pyplot state or interactive backend is touched.

References
----------
.. [1] "Trace Event Format", Google (the JSON format read by chrome://tracing
   and Perfetto), https://docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .simulate import Op, Simulation

__all__ = ["gantt", "save_gantt", "chrome_trace", "write_trace", "IMAGE_FORMATS"]

IMAGE_FORMATS = ("png", "svg", "pdf")
FORWARD_COLOR = "#4C72B0"
BACKWARD_COLOR = "#DD8452"
WEIGHT_GRAD_COLOR = "#55A868"
IDLE_COLOR = "#E6E6E6"
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
    for op in sim.timeline:
        ax.barh(op.stage, op.duration, left=op.start, height=height, color=_op_color(sim, op), edgecolor="white", linewidth=0.6, zorder=2)
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
    handles.append(Patch(color=IDLE_COLOR, label="idle"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    _number_boxes(fig, ax, sim)
    return fig


def _local_chunk(sim: Simulation, op: Op) -> int:
    """Which of its device's v chunks ``op`` runs (0 for the first)."""
    return (op.chunk // sim.num_stages) if op.chunk is not None else 0


def _shade(color: str, local_chunk: int, virtual_stages: int) -> str:
    """``color`` mixed towards white for later chunks of a device (the first keeps it)."""
    if virtual_stages <= 1 or local_chunk == 0:
        return color
    mix = 0.55 * local_chunk / (virtual_stages - 1)
    rgb = [int(color[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * mix):02X}" for c in rgb)


def _op_color(sim: Simulation, op: Op) -> str:
    base = {"F": FORWARD_COLOR, "B": BACKWARD_COLOR, "W": WEIGHT_GRAD_COLOR}[op.kind]
    return _shade(base, _local_chunk(sim, op), sim.virtual_stages)


def _legend(sim: Simulation) -> list[tuple[str, str]]:
    """``(label, colour)`` of every kind of box the chart can hold."""
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


def _number_boxes(fig, ax, sim: Simulation) -> None:
    """Write the microbatch number in every box wide enough to hold it."""
    fig.draw_without_rendering()  # settle the layout to learn how wide 1 ms is on the page
    x0, x1 = ax.get_xlim()
    pts_per_ms = ax.get_window_extent().width * 72.0 / fig.dpi / (x1 - x0)
    for op in sim.timeline:
        text = str(op.microbatch)
        # a digit is about 0.6 em wide; keep a little margin on both sides
        fontsize = min(9.0, op.duration * pts_per_ms / (0.62 * len(text) + 0.5))
        if fontsize >= 5.5:
            ax.text(op.start + op.duration / 2, op.stage, text, ha="center", va="center",
                    color="white", fontsize=fontsize, zorder=3)


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
    for op in sim.timeline:
        events.append(_trace_op(sim, op, pid))
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
