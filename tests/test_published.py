"""Integrity of the published-run data (benchmarks/calibration/published.py): every row cites, adds up and is as tagged."""
from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.calibration import published as P  # noqa: E402

UNITS = {"TFLOP/s/GPU", "tokens/s/GPU", "MFU", "s/step", "GPU-hours/1e12 tokens"}
DENSE_PEAK_TFLOPS = {  # vendor dense peaks (no sparsity), the ceiling no measurement can pass
    ("A100-80G", "fp16"): 312.0, ("A100-80G", "bf16"): 312.0,
    ("H100-SXM", "fp16"): 989.0, ("H100-SXM", "bf16"): 989.0, ("H100-SXM", "fp8-tensorwise"): 1979.0,
    ("H200", "fp8-tensorwise"): 1979.0, ("H800", "fp8-blockwise"): 1979.0,
    ("B200", "bf16"): 2250.0, ("B200", "mxfp8"): 4500.0, ("B200", "fp8-tensorwise"): 4500.0,
    ("GB200", "bf16"): 2500.0, ("GB200", "fp8-tensorwise"): 5000.0,
}


@pytest.mark.parametrize("run", P.RUNS, ids=lambda r: r.key)
def test_row_cites_and_adds_up(run):
    assert run.source in P.SOURCES
    assert run.model in P.MODELS
    assert run.gpu in P.GPUS
    assert run.precision in P.PRECISIONS
    assert set(run.regime) <= set(P.REGIMES) and run.regime
    model = P.MODELS[run.model]
    # regimes are what the row says, not a free label
    assert ("moe" in run.regime) == model.is_moe
    assert ("dense" in run.regime) == (not model.is_moe)
    assert ("fp8" in run.regime) == (run.precision != "bf16")
    assert (run.fp8_recipe is None) == (run.precision == "bf16")
    assert run.fp8_recipe in (None, "tensorwise", "delayed", "blockwise", "rowwise", "mxfp8")
    assert ("long-context" in run.regime) == (run.cp > 1 or run.seq_len >= 32768)
    # the layout covers the job exactly, as Megatron / torchtitan require
    assert min(run.tp, run.pp, run.cp, run.dp, run.ep) >= 1
    assert run.tp * run.pp * run.cp * run.dp == run.gpus
    etp = run.etp or 1
    assert (run.dp * run.tp * run.cp) % (run.ep * etp) == 0, "the expert group must tile tp x cp x dp"
    if not model.is_moe:
        assert run.ep == 1 and run.moe is None
    else:
        assert run.moe is not None
        assert model.experts % run.ep == 0, "every EP rank holds whole experts"
    if run.vpp is not None and run.vpp > 1:
        assert run.pp > 1
    if run.ga is not None and run.mbs is not None and run.gbs is not None:
        assert run.gbs == run.mbs * run.dp * run.ga
    if run.gbs is not None:
        assert run.gbs % run.dp == 0, "every data-parallel replica gets whole sequences"
    if run.mbs is not None and run.gbs is not None:
        assert run.gbs % (run.mbs * run.dp) == 0
    assert run.seq_len >= 1024
    # what was measured, as printed
    assert run.measured and any(not m.derived for m in run.measured)
    for m in run.measured:
        assert m.unit in UNITS and m.value > 0
        assert m.derived or m.printed, "a printed number keeps its printed text"
        if m.unit == "MFU":
            assert 0 < m.value < 1
    assert run.holdout == (run.source in P.HOLDOUT_SOURCES)
    if run.peak_memory is not None:
        assert run.peak_memory.unit in ("GiB", "GB") and 0 < run.peak_memory.value < 200


def test_sources_are_complete():
    for key, s in P.SOURCES.items():
        assert s.title and s.url.startswith("https://") and s.where and s.version and s.read_on, key
    used = ({r.source for r in P.RUNS} | {g.source for g in P.GROUPED_GEMM} | {a.source for a in P.ATTENTION}
            | {s.source for s in P.LAYOUT_SPEEDUPS})
    assert used == set(P.SOURCES), "every source is used and every used source is listed"
    assert P.HOLDOUT_SOURCES <= set(P.SOURCES)


def test_no_duplicate_rows():
    keys = Counter(r.key for r in P.RUNS)
    assert not [k for k, n in keys.items() if n > 1]
    content = Counter((r.source, r.model, r.gpu, r.gpus, r.precision, r.layout, r.mbs, r.gbs, r.seq_len, r.measured)
                      for r in P.RUNS)
    assert not [k for k, n in content.items() if n > 1]


def test_coverage_targets():
    assert len(P.runs_in("moe")) >= 20
    assert len(P.runs_in("long-context")) >= 8
    assert len(P.runs_in("fp8")) >= 6
    modern = {"H100-SXM", "H100-96G-500W", "H800", "H200", "B200", "GB200"}
    assert sum(1 for r in P.runs_in("dense") if r.gpu in modern) >= 6
    # FP8 rows paired with the same run in BF16
    fams = P.families()
    paired = [t for t, rows in fams.items() if t.startswith("precision:") and {r.precision for r in rows} >= {"bf16"}
              and any(r.precision != "bf16" for r in rows)]
    assert len(paired) >= 4
    # MoE rows from more than one framework and hardware generation
    assert len({r.source for r in P.runs_in("moe")}) >= 5
    assert {"H100-SXM", "B200", "GB200"} <= {r.gpu for r in P.runs_in("moe")}


def test_families_differ_in_the_knob_their_tag_names():
    fams = P.families()
    assert any(t.startswith("layout:") and P.MODELS[rows[0].model].is_moe for t, rows in fams.items())
    for tag, rows in fams.items():
        kind = tag.split(":", 1)[0]
        assert kind in P.FAMILY_KINDS, tag
        assert len(rows) >= 2, tag
        assert len({r.model for r in rows}) == 1, tag
        assert len({r.gpu for r in rows}) == 1, tag
        if kind == "layout":
            assert len({(r.precision, r.seq_len, r.gbs) for r in rows}) == 1, tag
            assert len({(r.layout, r.mbs) for r in rows}) == len(rows), tag
        if kind == "precision":
            assert len({r.layout for r in rows}) == 1, tag
            assert len({r.precision for r in rows}) == len(rows), tag
        if kind == "dispatcher":
            assert len({r.layout for r in rows}) == 1, tag
            assert len({r.moe.dispatcher for r in rows if r.moe}) == len(rows), tag
        if kind in ("overlap", "routing", "schedule"):
            assert len({(r.precision, r.seq_len) for r in rows}) == 1, tag
        if kind == "recompute":
            assert len({(r.layout, r.precision, r.seq_len, r.gbs) for r in rows}) == 1, tag
            assert len({(r.recompute, r.recompute_modules) for r in rows}) == len(rows), tag
        if kind == "scale":
            assert len({r.gpus for r in rows}) == len(rows), tag


def test_holdout_is_about_a_third_by_whole_sources():
    held = [r for r in P.RUNS if r.holdout]
    assert 0.25 <= len(held) / len(P.RUNS) <= 0.45
    for src in {r.source for r in P.RUNS}:
        assert len({r.holdout for r in P.RUNS if r.source == src}) == 1
    # each regime keeps rows on both sides
    for reg in P.REGIMES:
        rows = P.runs_in(reg)
        assert any(r.holdout for r in rows) and any(not r.holdout for r in rows), reg


@pytest.mark.parametrize("key", sorted(P.MODELS))
def test_model_fields_are_consistent(key):
    m = P.MODELS[key]
    assert m.source and m.layers > 0 and m.hidden > 0 and m.heads > 0 and m.vocab > 0
    assert m.heads % m.kv_heads == 0
    if m.is_moe:
        assert 0 < m.top_k <= m.experts and m.moe_ffn > 0
        assert all(0 <= i < m.layers for i in m.dense_layers)
        assert (m.shared_experts == 0) == (m.shared_ffn == 0)
    else:
        assert m.top_k == m.moe_ffn == 0 and not m.dense_layers
    if m.kv_lora_rank:
        assert m.head_dim == m.qk_nope_head_dim + m.qk_rope_head_dim and m.v_head_dim > 0
    elif key not in ("gpt-oss-120b", "qwen3-235b-a22b", "qwen3-30b-a3b"):
        assert m.heads * m.head_dim == m.hidden


def test_models_match_the_configs_we_ship():
    """The Qwen3 entries agree with the project's HF fixture and presets (independent copies of the same configs)."""
    cfg = json.loads((ROOT / "tests/fixtures/hf/Qwen3-30B-A3B/config.json").read_text())
    m = P.MODELS["qwen3-30b-a3b"]
    assert (m.layers, m.hidden, m.ffn, m.heads, m.kv_heads, m.head_dim, m.vocab, m.experts, m.top_k, m.moe_ffn) == (
        cfg["num_hidden_layers"], cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"],
        cfg["num_key_value_heads"], cfg["head_dim"], cfg["vocab_size"], cfg["num_local_experts"],
        cfg["num_experts_per_tok"], cfg["moe_intermediate_size"])
    assert m.tied_embeddings == cfg["tie_word_embeddings"]
    for key, preset in (("qwen3-30b-a3b", "qwen3-vl-30b-a3b"), ("qwen3-235b-a22b", "qwen3-vl-235b-a22b")):
        doc = yaml.safe_load((ROOT / "models" / f"{preset}.yaml").read_text())
        llm = next(mod for mod in doc["modules"] if mod["kind"] == "llm")
        m = P.MODELS[key]
        assert (m.layers, m.hidden, m.heads, m.kv_heads, m.head_dim, m.vocab, m.experts, m.top_k, m.moe_ffn) == (
            llm["layers"], llm["hidden"], llm["heads"], llm["kv_heads"], llm["head_dim"], llm["vocab"],
            llm["experts"], llm["top_k"], llm["moe_ffn"]), key
        assert preset in m.preset


def test_kernel_rows_stay_under_the_peak():
    for g in P.GROUPED_GEMM:
        assert g.source in P.SOURCES and g.groups >= 1 and min(g.m_total, g.n, g.k) > 0
        t = g.tflops()
        if g.passes == "moe-layer fwd+bwd":
            assert t is None
            continue
        assert t is not None and 0 < t < DENSE_PEAK_TFLOPS[(g.gpu, g.dtype)], (g, t)
    # grouped GEMM on B200 in bf16 is well below peak and MXFP8 beats it at every expert count
    by = {(g.dtype, g.groups, g.n): g.tflops() for g in P.GROUPED_GEMM if g.kind == "grouped-fwd-bwd"}
    for (dt, groups, n), t in by.items():
        if dt == "bf16":
            assert t < by[("mxfp8", groups, n)]
    for a in P.ATTENTION:
        assert 0 < a.tflops < DENSE_PEAK_TFLOPS[(a.gpu, "fp16")]
        assert a.head_dim in (64, 128, 256) and a.passes in ("fwd", "fwd+bwd")
    # causal masking costs throughput at short sequences in every published series
    lookup = {(a.source, a.gpu, a.kernel, a.passes, a.causal, a.head_dim, a.seq_len): a.tflops for a in P.ATTENTION}
    pairs = [(v, lookup[k[:4] + (False,) + k[5:]]) for k, v in lookup.items() if k[4] and k[6] == 512
             and k[:4] + (False,) + k[5:] in lookup]
    assert len(pairs) >= 8 and all(c < nc for c, nc in pairs)


def test_layout_speedups_form_families_with_a_baseline():
    fams: dict[str, list] = {}
    for ls in P.LAYOUT_SPEEDUPS:
        assert ls.source in P.SOURCES and ls.model in P.MODELS and ls.precision in P.PRECISIONS
        assert 0.3 < ls.speedup < 3.0
        fams.setdefault(ls.family, []).append(ls)
    for tag, rows in fams.items():
        assert len(rows) >= 2 and len({r.seq_len for r in rows}) == 1, tag
        assert len({(r.tp, r.cp) for r in rows}) == len(rows), tag
        assert sum(1 for r in rows if r.speedup == 1.0) == 1, "one baseline per family"
    # every GPU generation the cost model targets has a measured dense BF16 matmul ceiling
    mamf = {g.gpu for g in P.GROUPED_GEMM if g.kind == "dense-max" and g.dtype == "bf16"}
    assert {"A100-80G", "H100-SXM", "B200", "GB200"} <= mamf


def test_results_markdown_is_current():
    text = (ROOT / "benchmarks/results/published.md").read_text()
    assert text == P.to_markdown(), "run `python -m benchmarks.calibration.published` to regenerate"
