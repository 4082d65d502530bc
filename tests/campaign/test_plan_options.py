"""The campaign at ``plan``'s option doors: the batch and its microbatch counts (more options once PlanOptions checks itself).

Issue 35: ``--global-batch 10^9`` looped over every candidate divisor (10^9
trial divisions) past any time limit. The divisors are now found in O(sqrt n)
steps, only those up to MAX_MICROBATCHES are screened, and a batch beyond
MAX_GLOBAL_BATCH (docs/limits.md) is refused at the door, naming the field.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from partitioner.core.limits import MAX_GLOBAL_BATCH, MAX_MICROBATCHES
from partitioner.planning import microbatch_candidates, plan_model
from partitioner.planning.run import divisors
from partitioner.problem import ProblemError
from strategies import examples
from tests.campaign.doors import assert_refused, run_cli


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(1, 20_000))
def test_divisors_are_every_divisor_in_order(n):
    assert divisors(n) == [d for d in range(1, n + 1) if n % d == 0]


@settings(max_examples=examples(50), deadline=None)
@given(st.integers(1, MAX_GLOBAL_BATCH), st.one_of(st.none(), st.integers(1, 10**6)))
def test_microbatch_candidates_are_the_divisors_a_problem_accepts(batch, limit):
    found = microbatch_candidates(batch, limit)
    cap = MAX_MICROBATCHES if limit is None else min(limit, MAX_MICROBATCHES)
    assert found == sorted(set(found)) and all(batch % m == 0 and m <= cap for m in found)
    assert found[0] == 1 and (batch > cap or found[-1] == batch)


def test_the_largest_batches_have_few_candidates():
    """2^24 (the limit) and 14 414 400 (the batch below it with the most divisors, 504)."""
    assert len(microbatch_candidates(MAX_GLOBAL_BATCH)) == 17  # 2^0 .. 2^16 <= 100 000
    assert len(divisors(14_414_400)) == 504
    assert len(divisors(10**9)) == 100  # found in 31 623 steps, not 10^9


@pytest.mark.parametrize("batch", [MAX_GLOBAL_BATCH + 1, 10**9, 10**18, 0, -4])
def test_plan_model_refuses_a_batch_outside_its_range(batch):
    with pytest.raises(ProblemError) as info:
        plan_model("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=batch, method="greedy")
    assert info.value.path == "global_batch"


@pytest.mark.slow
@pytest.mark.parametrize("batch", ["1000000000", "1000000000000000000000"])
def test_plan_with_an_absurd_batch_is_one_line_at_once(tmp_path, batch):
    code, out, err, _, _ = run_cli(tmp_path, "plan", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1",
                                   "--global-batch", batch, "--time-limit", "5", timeout=120)
    assert_refused(code, err, "--global-batch", str(MAX_GLOBAL_BATCH), codes=(2,))
    assert out == ""


@pytest.mark.parametrize("args, names", [
    (["--nodes", "x"], "--nodes"),
    (["--nodes", "1e9"], "--nodes"),
    (["--max-stages", "1.5"], "--max-stages"),
    (["--global-batch", ""], "--global-batch"),
    (["--fps", "abc"], "--fps"),
    (["--images", "2.5"], "--images"),
    (["--bogus", "1"], "--bogus"),
    (["--nodes"], "--nodes"),
])
def test_an_option_typer_cannot_parse_is_one_line_naming_it(capsys, monkeypatch, args, names):
    """Typer's usage box (usage, hint, a framed error: 5 lines or more) is one line like every other bad input."""
    from partitioner.cli import main

    base = {"--model": "llava-1.5-7b", "--cluster": "dgx-h100", "--nodes": "1", "--global-batch": "8"}
    given = [a for a in args if a.startswith("--")]
    argv = [x for k, v in base.items() if k not in given for x in (k, v)] + args
    monkeypatch.setattr("sys.argv", ["partitioner", "plan", *argv])
    with pytest.raises(SystemExit) as info:
        main()
    err = capsys.readouterr().err
    assert_refused(info.value.code if isinstance(info.value.code, int) else 1, err, names, codes=(2,))


def test_partitioner_alone_still_shows_the_help(capsys, monkeypatch):
    """No command is not a usage error on one line: Typer's help screen, exit 2 (no_args_is_help)."""
    from partitioner.cli import main

    monkeypatch.setattr("sys.argv", ["partitioner"])
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    assert info.value.code == 2
    assert "plan" in captured.out + captured.err and "Usage" in captured.out + captured.err
