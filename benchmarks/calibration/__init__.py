"""Calibration: the cost model's predictions against published, measured training runs.

Modules
-------
dense
    Megatron-LM's dense tables (SC'21 Table 1, MLSys'23 Table 5) evaluated as published; its ``main`` is
    ``python -m benchmarks.calibration`` and also runs :mod:`.runs`.
published
    The published runs (MoE, long context, FP8, dense at scale), each with its source, layout and measured time.
runs
    The MoE and long-context runs of :mod:`.published` with the published layout forced: medians per regime,
    and the predicted order of several layouts of one model.
fp8
    FP8 runs and FP8/BF16 pairs of :mod:`.published` (``python -m benchmarks.calibration.fp8``).
fit
    Whether every published run that trained fits in memory under the knobs it used
    (``python -m benchmarks.calibration.fit``).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Callable

__all__ = ["RESULTS", "results_cli"]

RESULTS = Path(__file__).resolve().parents[1] / "results"


def results_cli(argv: list[str] | None, description: str, stem: str, build: Callable[[], dict[str, Any]],
                markdown: Callable[[dict[str, Any]], str]) -> dict[str, Any]:
    """Parse ``--out`` (default :data:`RESULTS`), build the document (its ``seconds`` recorded) and write
    ``<stem>.json`` and ``<stem>.md``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    doc = build()
    doc["seconds"] = time.perf_counter() - start
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    (args.out / f"{stem}.md").write_text(markdown(doc))
    return doc
