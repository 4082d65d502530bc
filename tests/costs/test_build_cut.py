"""Problem builds stop at a deadline and share their compute terms (issue 35).

:meth:`~partitioner.costs.ProblemBuilder.build` checks its deadline before
each layout of each layer's table and stops with
:class:`~partitioner.core.deadline.TimeLimitReached`; builders of one job
whose options differ only in the weight-memory count
(:data:`~partitioner.costs.build.COUNT_FIELDS`) share one
:class:`~partitioner.costs.TermsStore` and build exactly the problems they
would build alone. No timed assertion: the deadlines run on counted clocks.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from partitioner.core.deadline import Deadline, TimeLimitReached
from partitioner.costs import PARAM_MEMORY, CostOptions, ProblemBuilder, TermsStore
from partitioner.costs.build import COUNT_FIELDS, terms_options
from partitioner.planning.run import plan_options
from partitioner.planning.targets.memory import merge_stages, stage_knobs, stage_options
from partitioner.presets import load_cluster, load_model

MOE = "qwen3-vl-30b-a3b"  # dense vision blocks, MoE language blocks, a tied-free head: every kind of table
CLUSTER = "dgx-h100"


class _Ticks:
    """A clock that advances one second per read: a deadline of S s passes at the S-th check."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def _digest(problem) -> str:
    return hashlib.sha256(json.dumps(problem.to_dict(), sort_keys=True).encode()).hexdigest()


def _options(**extra) -> CostOptions:
    return plan_options({"cp_degrees": [1, 2], "cp_min_tokens": 1, **extra})  # cp keys on the language layers too


def test_a_spent_deadline_stops_the_build_before_its_first_layout():
    builder = ProblemBuilder(MOE, CLUSTER, nodes=1, options=_options())
    clock = _Ticks()
    spent = Deadline(0.5, clock)
    with pytest.raises(TimeLimitReached) as stopped:
        builder.build(64, 8, spent)
    assert stopped.value.what.startswith("building m=8: layer ")
    assert builder.store.computed == 0  # nothing was computed, nothing half-built kept


def test_a_deadline_passing_mid_build_stops_after_the_units_it_allowed():
    whole = ProblemBuilder(MOE, CLUSTER, nodes=1, options=_options())
    whole.build(64, 8)
    every = whole.store.computed
    clock = _Ticks()
    partial = ProblemBuilder(MOE, CLUSTER, nodes=1, options=_options())
    with pytest.raises(TimeLimitReached):
        partial.build(64, 8, Deadline(clock.now + 4.5, clock))  # made at tick 1, passes at the 4th check
    assert 0 < partial.store.computed < every
    # the terms found before the cut are kept: the same build afterwards equals a fresh one
    assert _digest(partial.build(64, 8)) == _digest(whole.build(64, 8))


def test_an_unlimited_deadline_builds_the_same_problem():
    a = ProblemBuilder(MOE, CLUSTER, nodes=1, options=_options()).build(64, 8, Deadline(None))
    b = ProblemBuilder(MOE, CLUSTER, nodes=1, options=_options()).build(64, 8)
    assert _digest(a) == _digest(b)


@pytest.mark.parametrize("count", sorted(PARAM_MEMORY))
def test_builders_of_every_memory_count_share_the_terms_and_build_what_they_build_alone(count):
    spec, cluster = load_model(MOE), load_cluster(CLUSTER)
    store = TermsStore(spec, cluster, 1)
    first = ProblemBuilder(spec, cluster, nodes=1, options=_options(), terms=store)
    first.build(64, 8)
    computed = store.computed
    assert computed > 0
    counted = _options(memory_count=count)
    assert (counted != first.opts) == (count != CostOptions().memory_count)
    assert terms_options(counted) == terms_options(first.opts)
    shared = ProblemBuilder(spec, cluster, nodes=1, options=counted, terms=store).build(64, 8)
    assert store.computed == computed  # not one term computed again
    alone = ProblemBuilder(spec, cluster, nodes=1, options=counted).build(64, 8)
    assert _digest(shared) == _digest(alone)


def test_options_that_change_the_compute_get_their_own_terms():
    spec, cluster = load_model(MOE), load_cluster(CLUSTER)
    store = TermsStore(spec, cluster, 1)
    ProblemBuilder(spec, cluster, nodes=1, options=_options(), terms=store).build(64, 8)
    computed = store.computed
    other = _options(flash_attention=False)
    shared = ProblemBuilder(spec, cluster, nodes=1, options=other, terms=store).build(64, 8)
    assert store.computed > computed
    assert _digest(shared) == _digest(ProblemBuilder(spec, cluster, nodes=1, options=other).build(64, 8))


def test_the_count_fields_are_the_ones_a_count_sets():
    for count in PARAM_MEMORY.values():
        assert set(count.option_overrides()) | {"memory_count"} <= set(COUNT_FIELDS)


def test_a_store_refuses_another_job():
    store = TermsStore(load_model(MOE), load_cluster(CLUSTER), 1)
    with pytest.raises(ValueError):
        ProblemBuilder(MOE, CLUSTER, nodes=2, options=_options(), terms=store)


@pytest.mark.parametrize("target", ["megatron", "torchtitan", "deepspeed"])
def test_partial_problems_of_one_zero_stage_merge_into_the_same_problem(target):
    """``build(zero=k)`` keeps what :func:`merge_stages` reads: the merged problem is the one of full builds."""
    from partitioner.frameworks import RULES

    opts = _options()
    rules = RULES[target]
    per = stage_options(target, rules.zero, None, opts)
    others = {z: o for z, o in per.items() if o != opts}
    assert others
    knobs = stage_knobs(target, others)
    base = ProblemBuilder(MOE, CLUSTER, nodes=1, options=opts).build(64, 8)
    full = {z: ProblemBuilder(MOE, CLUSTER, nodes=1, options=o).build(64, 8) for z, o in others.items()}
    part = {z: ProblemBuilder(MOE, CLUSTER, nodes=1, options=o).build(64, 8, zero=knobs[z]) for z, o in others.items()}
    assert all(sum(map(len, (la.costs for la in part[z].layers))) < sum(map(len, (la.costs for la in full[z].layers)))
               for z in others)
    counts = {z: o.memory_count for z, o in per.items()}
    assert _digest(merge_stages(base, part, knobs, counts)) == _digest(merge_stages(base, full, knobs, counts))


def test_a_partial_problem_keeps_every_entry_of_a_layer_it_would_leave_empty():
    """Without dp = 1 layouts (stages of 16 GPUs and more, tp at most 8) a stage no knob has (ZeRO-2) leaves
    every table empty: each keeps all of its entries, the whole problem."""
    cluster = replace(load_cluster("gb200-nvl72"), stage_sizes=(16, 32, 64))
    opts = plan_options({"max_tp": 8})  # cp 1 only: a dp 1 layout would be one of 8 GPUs at most
    builder = ProblemBuilder(MOE, cluster, nodes=1, options=opts, gpus=64)
    whole = builder.build(64, 8)
    assert all(lay.dp > 1 for layer in whole.layers for lay in layer.costs)
    assert _digest(builder.build(64, 8, zero=2)) == _digest(whole)
    assert _digest(builder.build(64, 8, zero=1)) != _digest(whole)
