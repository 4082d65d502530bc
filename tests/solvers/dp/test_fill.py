"""The general recursion's compact tables (:mod:`partitioner.solvers.dp.recursion`).

Every table entry is checked against a plain recursion written straight from
the definition in :mod:`partitioner.solvers.dp.solver` (loops over stages, successor
states, categories and devices) for every placement automaton, both modes and
finite and infinite thresholds; dp's answers with transfers are checked
against ``brute`` under every placement mode, schedule and format; and the
memory the tables take is the memory the budget check counts.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import partitioner.solvers.dp.recursion as dp_recursion
from checks import check_plan
from partitioner import solve
from partitioner.problem import Problem
from partitioner.solvers.dp.solver import DPModel
from partitioner.solvers.dp.tables import table_bytes
from strategies import examples, small_problems, small_v2_problems

REL = 1e-9


def reference(model: DPModel, auto, X: np.ndarray, mode: str, limit: float, stage=None, top: int | None = None,
              join=None) -> dict:
    """V[(a, level, z, c, D)] for levels 1..top (all) from the definition: a stage a..b of size d in state
    zn after the suffix's state zp (outgoing category co) valued ``stage(i, stash, a, b, xo, xi, lim)``
    with ``xo = X[b, co]`` (0 for the last stage) and ``xi = X[a - 1, c]``, inf if it does not fit;
    by default its time compute + xo + xi, fitting when at most the threshold; joined to the suffix's
    value by ``join(t, rest, xi)`` (default: max, or the sum)."""
    L, N, K = model.L, model.N, model.K
    lim = limit * (1 + 1e-12) if math.isfinite(limit) else math.inf
    C = len(auto.categories)
    xin = np.vstack([np.zeros((1, C)), X[:-1]])
    V: dict = {}

    def time_of(i, stash, a, b, xo, xi, lim):
        t = model.compute_matrix(i, stash)[a, b] + xo + xi
        return t if t <= lim else math.inf

    stage = stage or time_of

    def get(*key) -> float:
        return V.get(key, math.inf)

    def put(key, value: float) -> None:
        if value < get(*key):
            V[key] = value

    for level in range(1, (top or K) + 1):
        stash = model.stash_of_level[level]
        sources = [s for s in [level - 1] + ([level] if model.bucket and level == K else []) if s >= 1]
        for a in range(L - level, -1, -1):
            for i, d in enumerate(model.sizes):
                if d > N:
                    continue
                cats = [c for lo, hi in auto.incoming[i] for c in range(lo, hi)]
                if level == 1:
                    for c in cats:
                        t = stage(i, stash, a, L - 1, 0.0, float(xin[a, c]), lim)
                        if math.isfinite(t):
                            put((a, 1, auto.init[i], c, d), join(t, 0.0, float(xin[a, c])) if join else t)
                for src in sources:
                    for b in range(a, L - level + 1):
                        for zp, zn, co in zip(*auto.trans[i]):
                            for c in cats:
                                t = stage(i, stash, a, b, float(X[b, co]), float(xin[a, c]), lim)
                                if not math.isfinite(t):
                                    continue
                                for D in range(d, N + 1):
                                    rest = get(b + 1, src, int(zp), int(co), D - d)
                                    if math.isfinite(rest):
                                        value = join(t, rest, float(xin[a, c])) if join else (
                                            max(t, rest) if mode == "minmax" else t + rest)
                                        put((a, level, int(zn), c, D), value)
    return V


def prefix_band(model: DPModel, limit: float) -> list[float]:
    """band[a]: the fewest devices stages with compute at most the threshold (stash 1) cover layers
    0..a-1 with (0 without a threshold): no plan under the threshold gives the suffix from a more than
    N - band[a]."""
    L = model.L
    if not math.isfinite(limit):
        return [0] * (L + 1)
    lim = limit * (1 + 1e-12)
    band = [0] + [math.inf] * L
    for b in range(L):
        for i, d in enumerate(model.sizes):
            cb = model.compute_matrix(i, 1)
            for a in range(b + 1):
                if cb[a, b] <= lim:
                    band[b + 1] = min(band[b + 1], band[a] + d)
    return band


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems(max_layers=7), st.sampled_from([0.0, 0.2, 0.5, 0.8, 1.0]))
def test_the_device_band_is_the_definitions(problem, quantile):
    model = DPModel(problem)
    model.prepare()
    finite = [v for i in range(len(model.sizes)) for v in model.compute_matrix(i, 1).ravel() if math.isfinite(v)]
    limit = float(np.quantile(finite, quantile)) if finite else 1.0
    band = prefix_band(model, limit)
    found = dp_recursion.prefix_devices(model, limit * (1 + 1e-12))
    big = 2 * model.N + 1
    assert [int(x) if x < big else math.inf for x in found] == [b if b < big else math.inf for b in band]


def with_transfers(problem: Problem, floor: int, schedule: str | None = None) -> Problem:
    """``problem`` with every boundary carrying at least ``floor`` x (its index + 1) bytes."""
    doc = problem.to_dict()
    for n, layer in enumerate(doc["layers"]):
        layer["out_bytes"] = max(layer["out_bytes"], floor * (n + 1))
    if schedule:
        doc["training"]["schedule"] = schedule
    return Problem.from_dict(doc)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    small_problems(max_layers=5),
    st.sampled_from(["natural", "size", "run", "bins", "none"]),
    st.sampled_from(["minsum", "minmax"]),
    st.sampled_from([math.inf, 0.3, 0.6, 0.9]),
    st.integers(1, 3000),
    st.sampled_from([None, 0, 1]),
    st.sampled_from([None, 1]),
)
def test_every_table_entry_matches_the_definition(monkeypatch, problem, kind, mode, quantile, floor, direct, firsts):
    model = DPModel(with_transfers(problem, floor))
    model.prepare()
    finite = [v for i in range(len(model.sizes)) for v in model.compute_matrix(i, 1).ravel() if math.isfinite(v)]
    limit = math.inf if not math.isfinite(quantile) or not finite else float(np.quantile(finite, quantile))
    with monkeypatch.context() as patch:
        if direct is not None:  # minmax: the split at r* for every candidate (0), or rank by rank up to 1
            patch.setattr(dp_recursion, "DIRECT_RANKS", direct)
        if firsts is not None:  # one first layer per kernel call (the bucket level's rows cross the calls)
            patch.setattr(dp_recursion, "FIRSTS_PER_CALL", firsts)
        check_tables(model, model.natural_placement() if kind == "natural" else kind, mode, limit)


def check_tables(model: DPModel, kind: str, mode: str, limit: float) -> None:
    """Every entry of the recursion's rows equals the definition's, no other entry is finite, and the keys the
    tables keep are each key's least over its rows, bit for bit as a solve keeps them without the rows."""
    auto = model._automaton_for(kind)
    X = model._transfer_table(auto) if kind != "none" else np.zeros((model.L, len(auto.categories)))
    model.keep_rows = True
    tables = model.recursion(auto, X, mode, limit, None)
    check_keys(model, tables)
    same_keys_without_rows(model, auto, X, mode, limit, tables)
    expected = reference(model, auto, X, mode, limit)
    band = prefix_band(model, limit)
    for key, value in expected.items():
        found = tables.value(*key)
        if key[4] <= model.N - band[key[0]]:
            assert found == pytest.approx(value, rel=1e-12), key
        else:  # more devices than any plan under the threshold leaves the suffix: never read, no less than it
            assert found >= value * (1 - 1e-12), key
    for key in finite_entries(model, tables):
        assert key in expected, key


def finite_entries(model: DPModel, tables):
    """The keys (a, level, z, c, D) of the finite entries of the recursion's rows (kept: ``keep_rows``)."""
    lay = tables.layout
    for level in range(1, tables.top + 1):
        for i, arr in tables.entries(level).items():
            for a, zl, cl, Di in zip(*np.nonzero(np.isfinite(arr))):
                yield (int(a), level, int(lay.states[i][zl]), int(lay.cats[i][cl]), int(Di) + model.sizes[i])


def check_keys(model: DPModel, tables) -> None:
    """Each key the tables keep is the least over its transitions' rows (first layers 0..L - level; the
    later ones infinite), its spans its finite columns, the first layer's row the row itself; and a
    recursion that keeps no rows keeps the same keys, bit for bit."""
    lay = tables.layout
    L = model.L
    for level in range(1, tables.top + 1):
        R, lo, hi = tables.R[level], tables.lo[level], tables.hi[level]
        assert R.shape[0] == max(L - level + 2, 1)
        for a in range(R.shape[0]):
            for k, (zps, cos) in enumerate(lay.keys):
                off, W = lay.key_offset[k], lay.key_width[k]
                want = np.full(W, np.inf)
                if a <= L - level:
                    for zp, co in zip(zps, cos):
                        d = lay.sizes[lay.auto.size_of[zp]]
                        for D in range(d, W):
                            want[D] = min(want[D], tables.value(a, level, int(zp), int(co), D))
                assert np.array_equal(R[a, off : off + W], want), (a, level, k)
                finite = np.flatnonzero(np.isfinite(want))
                if finite.size:
                    assert (lo[a, k], hi[a, k]) == (finite[0], finite[-1] + 1)
                else:
                    assert hi[a, k] == 0
        assert np.array_equal(tables.first_rows[level], tables.rows[level][: lay.flat_size])


def same_keys_without_rows(model: DPModel, auto, X, mode: str, limit: float, kept) -> None:
    """A recursion that keeps only the keys fills them as one that keeps every row, bit for bit."""
    model.keep_rows, model._pool, model._free_table = False, None, None
    try:
        lean = model.recursion(auto, X, mode, limit, None)
    finally:
        model.keep_rows = True
    for level in range(1, kept.top + 1):
        for x, y in ((lean.R, kept.R), (lean.lo, kept.lo), (lean.hi, kept.hi), (lean.first_rows, kept.first_rows)):
            assert np.array_equal(np.asarray(x[level]).view(np.int64), np.asarray(y[level]).view(np.int64)), level


@pytest.mark.parametrize("shape", [(6, 2, 4), (8, 2, 4), (6, 4, 2), (5, 1, 8)])
@pytest.mark.parametrize("kind", ["natural", "bins"])
@pytest.mark.parametrize("mode, limit, direct", [("minmax", math.inf, 0), ("minmax", 0.8, 0), ("minmax", math.inf, None),
                                                 ("minmax", 0.8, None), ("minsum", math.inf, None), ("minsum", 0.8, None)])
def test_table_entries_of_synthetic_problems_match_the_definition(monkeypatch, shape, kind, mode, limit, direct):
    # many stage sizes and categories: candidates where max(w + x, H) changes sides between categories
    # (direct = 0: every minmax candidate split at r*; None: the default, rank by rank when it fits few)
    from benchmarks.synthetic import synthetic_problem

    if direct is not None:
        monkeypatch.setattr(dp_recursion, "DIRECT_RANKS", direct)
    model = DPModel(synthetic_problem(*shape, layouts=None, transfers=True, seed=1, microbatches=4))
    model.prepare()
    if math.isfinite(limit):  # a threshold between the least and the largest stage times that fit
        finite = [v for i in range(len(model.sizes)) for v in model.compute_matrix(i, 1).ravel() if math.isfinite(v)]
        limit = float(np.quantile(finite, limit))
    check_tables(model, model.natural_placement() if kind == "natural" else kind, mode, limit)


def agree(problem: Problem, objective: str, options=None):
    oracle = solve(problem, "brute", objective=objective)
    if oracle.status == "error":  # an enumeration too large for the oracle
        assert "max_combinations" in oracle.message
        return
    result = solve(problem, "dp", objective=objective, options=options)
    assert result.status == oracle.status, (oracle.message, result.message)
    if oracle.status == "optimal":
        assert result.value == pytest.approx(oracle.value, rel=REL)
        assert result.bound == pytest.approx(result.value, rel=REL)
        check_plan(problem, result)


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    v2=st.booleans(),
    schedule=st.sampled_from(["1f1b", "zb-h1", "gpipe"]),
    objective=st.sampled_from(["bottleneck", "iteration"]),
    exact=st.booleans(),
)
def test_dp_matches_brute_with_transfers_on_several_nodes(data, v2, schedule, objective, exact):
    base = data.draw(small_v2_problems(max_layers=5) if v2 else small_problems(max_layers=6))
    problem = with_transfers(base, data.draw(st.integers(1, 3000)), schedule)
    agree(problem, objective, {"placement": "bins"} if exact else None)


def test_the_tables_take_the_memory_the_budget_check_counts():
    from benchmarks.synthetic import synthetic_problem

    problem = synthetic_problem(12, 4, 8, layouts=None, transfers=True, seed=1, microbatches=4)
    model = DPModel(problem)
    model.prepare()
    auto = model._automaton_for(model.natural_placement())
    tables = model.recursion(auto, model._transfer_table(auto), "minmax", math.inf, None)
    held = sum(x[level].nbytes for x in (tables.R, tables.lo, tables.hi, tables.first_rows)
               for level in range(1, tables.top + 1))
    assert 0 < held <= table_bytes(tables.layout, model.L, model.K)
    assert model.recursion_bytes(auto) >= held


def test_a_problem_the_dense_tables_could_not_hold_fits_the_budget():
    from benchmarks.synthetic import synthetic_problem

    problem = synthetic_problem(256, 32, 8, layouts=None, transfers=True, seed=0, objective="bottleneck")
    model = DPModel(problem)
    model.prepare()
    auto = model._automaton_for(model.natural_placement())
    dense = (model.L + 1) * (model.K + 1) * len(auto.states) * len(auto.categories) * (model.N + 1) * 8
    assert dense > 3 * 2**30  # the layout before: 8.8 GiB
    assert model.recursion_bytes(auto) < 2 * 2**30


def test_tables_over_the_budget_are_refused_with_their_size():
    from benchmarks.synthetic import synthetic_problem

    problem = synthetic_problem(64, 8, 8, layouts=None, transfers=True, seed=0, objective="bottleneck")
    model = DPModel(problem)
    model.prepare()
    auto = model._automaton_for(model.natural_placement())
    need = model.recursion_bytes(auto)
    r = solve(problem, "dp", options={"memory_budget_gb": 0.9 * need / 2**30}, time_limit=60)
    assert r.status == "feasible" and r.plan is not None
    assert "recursion tables would need" in r.message and "placement states" in r.message
    check_plan(problem, r)
    fits = solve(problem, "dp", options={"memory_budget_gb": 1.1 * need / 2**30}, time_limit=120)
    assert fits.status == "optimal"


@pytest.mark.parametrize("kind", ["natural", "bins", "none"])
@pytest.mark.parametrize("mode, limit", [("minsum", math.inf), ("minsum", 0.7), ("minmax", math.inf), ("minmax", 0.7)])
@pytest.mark.parametrize("parts", [None, "uw", "fb"])
def test_the_tables_do_not_depend_on_the_number_of_threads(monkeypatch, kind, mode, limit, parts):
    # a level's chunks of first layers and its shared rows split among 1, 2 or 3 threads, one first
    # layer per call (so that every thread gets several): the same tables bit for bit, bucket level included
    from benchmarks.synthetic import synthetic_problem
    from partitioner.solvers.dp.options import GPipeSpec, ZeroBubbleSpec

    problem = synthetic_problem(12, 2, 4, layouts=None, transfers=kind != "none", seed=2, microbatches=3)
    model = DPModel(problem)
    model.parts = parts
    model.prepare()
    assert model.bucket  # the self-feeding level is among the levels compared
    model.spec = {"uw": ZeroBubbleSpec(model.m, 1, every_level=True), "fb": GPipeSpec("B")}.get(parts)
    if math.isfinite(limit):
        finite = [v for i in range(len(model.sizes)) for v in model.compute_matrix(i, 1).ravel() if math.isfinite(v)]
        limit = float(np.quantile(finite, limit)) * (1 if parts is None else 3 * model.m)
    auto = model._automaton_for(model.natural_placement() if kind == "natural" else kind)
    X = model._transfer_table(auto) if kind != "none" else np.zeros((model.L, len(auto.categories)))
    monkeypatch.setattr(dp_recursion, "FIRSTS_PER_CALL", 1)
    monkeypatch.setattr(dp_recursion, "THREAD_MIN_SECONDS", 0.0)  # small levels shared among the threads too
    monkeypatch.setenv("PARTITIONER_DP_KERNELS", "compiled")  # threads share only the compiled kernels' calls
    seen = []
    for threads in (1, 2, 3):
        monkeypatch.setattr(dp_recursion, "THREADS", threads)
        model._pool, model._free_table = None, None  # fresh tables per run
        tables = model.recursion(auto, X, mode, limit, None)
        seen.append([x[level].copy() for level in range(1, tables.top + 1)
                     for x in (tables.R, tables.lo, tables.hi, tables.first_rows)])
    assert any(np.isfinite(f).any() for f in seen[0])
    for other in seen[1:]:
        assert all(np.array_equal(x, y) for x, y in zip(seen[0], other))
