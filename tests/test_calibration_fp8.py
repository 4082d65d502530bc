"""Issue 34's calibration target for FP8: published FP8 runs and FP8/BF16 pairs, evaluated as published."""
from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.calibration.fp8 import absolute_rows, evaluate_run, pair_rows, run_options, to_markdown  # noqa: E402
from benchmarks.calibration.published import RUNS  # noqa: E402


def _run(key: str):
    return next(r for r in RUNS if r.key == key)


@pytest.fixture(scope="module")
def pairs():
    return pair_rows()


def test_fp8_over_bf16_speedups_of_the_same_runs(pairs):
    """Tensorwise FP8 against BF16 on the same layout (torchtitan's H100 tables): predicted within the target."""
    tensorwise = [p for p in pairs if "run" in p and p["base"]["precision"] == "bf16"
                  and p["run"]["precision"] == "fp8-tensorwise"]
    assert len(tensorwise) == 6
    logs = [abs(math.log(p["ratio"])) for p in tensorwise]
    assert statistics.median(logs) <= 0.06
    assert all(p["predicted_speedup"] > 1.15 for p in tensorwise)


@pytest.mark.xfail(strict=True, reason="issue 34's worst FP8/BF16 pair <= 0.12 not met: measured 0.130 "
                   "(docs/decisions.md, 2026-12-03)")
def test_fp8_over_bf16_speedups_worst_within_the_target(pairs):
    """The worst tensorwise FP8/BF16 pair within the target."""
    tensorwise = [p for p in pairs if "run" in p and p["base"]["precision"] == "bf16"
                  and p["run"]["precision"] == "fp8-tensorwise"]
    logs = [abs(math.log(p["ratio"])) for p in tensorwise]
    assert max(logs) <= 0.12


def test_fp8_runs_on_h100_predicted_as_published():
    """NVIDIA's dense FP8 runs on DGX-H100 (Megatron-Bridge 25.09-26.04 tables), layouts forced as published.

    The NeMo 24.07 rows (2024 software, delayed scaling) are in the table, predicted 6-28 % fast, and not in
    this target."""
    rows = [r for r in absolute_rows() if "skipped" not in r and r["gpu"] == "H100-SXM" and r["key"].startswith("mb")]
    assert len(rows) == 8
    logs = [abs(math.log(r["ratio"])) for r in rows]
    assert statistics.median(logs) <= 0.08 and max(logs) <= 0.15


def test_a_bf16_cost_model_would_miss_the_fp8_rows():
    """The same H100 FP8 runs costed in BF16 are predicted far too slow: the FP8 terms carry the prediction."""
    run = _run("mb2511-llama3-70b-h100-fp8cs")
    fp8 = evaluate_run(run)
    import dataclasses

    bf16 = evaluate_run(dataclasses.replace(run, precision="bf16"))
    assert fp8["ratio"] == pytest.approx(1.0, abs=0.1)
    assert bf16["ratio"] < 0.8


def test_runs_are_built_with_their_published_knobs_and_recipe():
    opts, knobs = run_options(_run("tta-llama3-70b-256gpu-fp8-rowwise-vanilla"))
    assert opts["precision"] == "fp8" and opts["fp8_recipe"] == "rowwise"
    assert (knobs.zero, knobs.recompute) == (3, "full") and opts["memory_count"] == "fsdp2"
    opts, knobs = run_options(_run("mb2511-llama31-405b-b200-mxfp8"))
    assert opts["fp8_recipe"] == "mxfp8" and knobs.zero == 1 and opts["cp_degrees"] == [1, 2]


def test_markdown_has_both_tables(pairs):
    doc = {"pairs": pairs, "pairs_summary": {"n": 0}, "absolute": [], "absolute_summary": {"n": 0}}
    text = to_markdown(doc)
    assert "same run in two precisions" in text and "tta-llama3-70b-vanilla" in text
