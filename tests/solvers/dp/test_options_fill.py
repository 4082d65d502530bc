"""The general recursion with options (zb-h1's and GPipe's iteration estimates) entry by entry.

Every table entry the vectorised options path of
:mod:`partitioner.solvers.dp.recursion` fills is compared, for exact
equality, with a plain recursion written from the definition in
:mod:`partitioner.solvers.dp.solver` and :mod:`partitioner.solvers.dp.options`:
loops over stages a..b, their Pareto options f, successor states, incoming
categories and devices, each stage valued with the spec's arithmetic in the
recursion's order (zb-h1: key ``(s u_f + k W_f) + s x``, value ``((u_f + xo)
+ H) + xi``; GPipe: ``F_f + xo`` and ``B_f + xi``, value ``(((F_f + xo) +
B_f) + H) + xi``). Both modes, finite and infinite thresholds,
one first layer per kernel call as well as the default chunks of first layers.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import partitioner.solvers.dp.recursion as dp_recursion
from partitioner.solvers.dp.options import GPipeSpec, ZeroBubbleSpec
from partitioner.solvers.dp.solver import DPModel
from strategies import examples, small_problems, small_v2_problems
from tests.solvers.dp.test_fill import check_keys, finite_entries, with_transfers
from tests.solvers.dp.test_fill import reference as fill_reference
from tests.solvers.dp.test_schedules import under

INF = math.inf


def stage_value(model: DPModel, spec, i: int, stash: int, a: int, b: int, xo: float, xi: float, mode: str, lim: float) -> float:
    """The definition: ``minmax`` the least key over the options, ``minsum`` the least rank-free part of
    the cost over the options whose key is at most ``lim`` (GPipe: only options with ``F + xo`` under
    the cap); the recursion adds the suffix's value to that part and then the incoming transfer
    (zb-h1 ``((u + xo) + H) + xi``, GPipe ``(((F + xo) + B) + H) + xi``, as the plain recursion forms
    ``((compute + xo) + H) + xi``)."""
    first, second = model.stage_options(i, stash)
    best = INF
    for f in range(first.shape[2]):
        p, q = float(first[a, b, f]), float(second[a, b, f])
        if not math.isfinite(p):
            continue
        if isinstance(spec, ZeroBubbleSpec):
            x = xo + xi
            key, part = (spec.s * p + spec.k * q) + spec.s * x, p + xo
        else:
            fwd, bwd = p + xo, q + xi
            if not fwd <= spec.f_cap:
                continue
            key, part = (bwd if spec.part == "B" else fwd), fwd + q
        if mode == "minmax":
            best = min(best, key)
        elif key <= lim:
            best = min(best, part)
    return best


def reference(model: DPModel, auto, X: np.ndarray, mode: str, limit: float, top: int) -> dict:
    """V[(a, level, z, c, D)] for levels 1..top from the definition, each stage valued by
    :func:`stage_value` (``minmax``: stages whose key is above the threshold pruned)."""

    def stage(i, stash, a, b, xo, xi, lim):
        t = stage_value(model, model.spec, i, stash, a, b, xo, xi, mode, lim)
        return t if mode == "minsum" or t <= lim else INF

    def join(t, rest, xi):
        return max(t, rest) if mode == "minmax" else (t + rest) + xi

    return fill_reference(model, auto, X, mode, limit, stage, top, join)


def options_model(problem, parts: str) -> DPModel:
    """A model set up as dp's iteration under zb-h1 ("uw") or GPipe ("fb") sets it up."""
    model = DPModel(problem)
    model.parts = parts
    model.prepare()
    model._free_table = None
    return model


def a_threshold(model: DPModel, quantile: float) -> float:
    """A threshold between the least and the largest keys of stages without transfers (inf: none)."""
    if not math.isfinite(quantile):
        return INF
    keys = [v for i in range(len(model.sizes)) for v in model.spec.prepare(*model.stage_options(i, 1))[0].ravel()
            if math.isfinite(v)]
    return float(np.quantile(keys, quantile)) if keys else INF


def check_option_tables(model: DPModel, kind: str, mode: str, limit: float) -> None:
    """Every entry the recursion fills equals the definition's exactly, and no other entry is finite."""
    auto = model._automaton_for(kind)
    X = model._transfer_table(auto) if kind != "none" else np.zeros((model.L, len(auto.categories)))
    model.keep_rows = True
    tables = model.recursion(auto, X, mode, limit, None)
    check_keys(model, tables)
    expected = reference(model, auto, X, mode, limit, tables.top)
    for key, value in expected.items():
        assert tables.value(*key) == value, (key, tables.value(*key), value)
    for key in finite_entries(model, tables):
        assert key in expected, key


def draw_spec(data, model: DPModel, schedule: str):
    if schedule == "zb-h1":
        level = data.draw(st.integers(1, model.K))
        return ZeroBubbleSpec(model.m, max(model.m - level + 1, 1))
    part = data.draw(st.sampled_from(["F", "B"]))
    cap = INF if part == "F" else data.draw(st.sampled_from([INF, 0.5, 0.9]))
    if math.isfinite(cap):
        model.spec = GPipeSpec("F")
        cap = a_threshold(model, cap) * (1 + 1e-12)
    return GPipeSpec(part, cap)


@pytest.mark.slow
@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    v2=st.booleans(),
    schedule=st.sampled_from(["zb-h1", "gpipe"]),
    kind=st.sampled_from(["natural", "bins", "none"]),
    mode=st.sampled_from(["minsum", "minmax"]),
    quantile=st.sampled_from([INF, 0.3, 0.6, 0.9]),
    chunk=st.sampled_from([None, 1, 2]),
)
def test_every_option_table_entry_matches_the_definition(monkeypatch, data, v2, schedule, kind, mode, quantile, chunk):
    base = data.draw(small_v2_problems(max_layers=5) if v2 else small_problems(max_layers=5))
    shares = data.draw(st.lists(st.floats(0.0, 1.0), min_size=base.num_layers, max_size=base.num_layers))
    problem = with_transfers(under(base, schedule, shares), data.draw(st.integers(1, 3000)))
    model = options_model(problem, "uw" if schedule == "zb-h1" else "fb")
    spec = draw_spec(data, model, schedule)
    model.spec = spec
    limit = a_threshold(model, quantile)
    with monkeypatch.context() as patch:
        if chunk is not None:  # first layers per kernel call (the bucket level's rows cross the calls)
            patch.setattr(dp_recursion, "FIRSTS_PER_CALL", chunk)
        check_option_tables(model, model.natural_placement() if kind == "natural" else kind, mode, limit)


@pytest.mark.parametrize("schedule", ["zb-h1", "gpipe"])
@pytest.mark.parametrize("mode, quantile", [("minmax", INF), ("minmax", 0.7), ("minsum", INF), ("minsum", 0.7)])
@pytest.mark.parametrize("chunk", [None, 1, 3])
def test_option_tables_of_a_synthetic_problem_match_the_definition(monkeypatch, schedule, mode, quantile, chunk):
    # many stage sizes, categories and first layers with different numbers of candidate last layers
    from benchmarks.synthetic import synthetic_problem

    base = synthetic_problem(7, 2, 4, layouts=None, transfers=True, seed=1, microbatches=4)
    problem = under(base, schedule, [0.2 + 0.1 * (n % 6) for n in range(base.num_layers)])
    model = options_model(problem, "uw" if schedule == "zb-h1" else "fb")
    model.spec = ZeroBubbleSpec(model.m, max(model.m - 2 + 1, 1)) if schedule == "zb-h1" else GPipeSpec("B")
    limit = a_threshold(model, quantile)
    if chunk is not None:
        monkeypatch.setattr(dp_recursion, "FIRSTS_PER_CALL", chunk)
    check_option_tables(model, model.natural_placement(), mode, limit)
