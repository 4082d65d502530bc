"""The format-v3 examples and their optima, worked by hand.

* ``examples/v3_cp_colocated.json`` (from the shared examples): one node of
  8 GPUs, one stage; vision fastest at dp 2 x cp 4, language at dp 2 x tp 4;
  known optimum 14.15988608 ms.
* ``examples/v3_long_context_cp2.json`` (issue 24's example): one node of 8
  GPUs, one stage; the language layers' activations of one long sequence
  fit only when context parallelism halves them (cp = 2).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from checks import check_plan
from partitioner import evaluate, load_problem, solve
from partitioner.plan import Plan, PlanError, Stage
from partitioner.problem import Layout

ROOT = Path(__file__).resolve().parents[2]
GiB = 2**30
EXACT = {"brute": {}, "dp": {}, "cpsat": {"num_workers": 1}, "milp": {}}


def test_cp_colocated_from_the_cli_is_14_15988608(cli):
    proc = cli("solve", ROOT / "examples" / "v3_cp_colocated.json", "--method", "brute", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["version"] == 3 and doc["status"] == "optimal"
    assert doc["value"] == pytest.approx(14.15988608, rel=1e-12)
    stage, = doc["plan"]["stages"]
    assert stage["configs"] == [{"dp": 2, "tp": 1, "cp": 4}, {"dp": 2, "tp": 4}]


@pytest.mark.parametrize("method", ["dp", "cpsat", "milp"])
def test_cp_colocated_every_exact_method_agrees(method):
    p = load_problem(ROOT / "examples" / "v3_cp_colocated.json")
    result = solve(p, method, options=EXACT[method], seed=1)
    assert result.status == "optimal"
    assert result.value == pytest.approx(14.15988608, rel=1e-9)
    check_plan(p, result)


def test_cp_colocated_reshard_moves_3_32_through_each_port():
    p = load_problem(ROOT / "examples" / "v3_cp_colocated.json")
    ev = evaluate(p, Plan((Stage.from_configs(0, 4, 8, [Layout.parse("dp2tp1cp4"), Layout.parse("dp2tp4")]),)))
    b = p.layers[1].out_bytes
    assert ev.stages[0].reshard_ms == pytest.approx(b * 3 / 32 / (p.cluster.intra_node_GBps * 1e6), rel=1e-12)
    assert ev.value == pytest.approx(14.15988608, rel=1e-12)


# --------------------------------------------------------------------------- the example, by hand

LONG = ROOT / "examples" / "v3_long_context_cp2.json"


def test_long_context_language_fits_only_with_cp2():
    """One stage (stash 1) of 20 GiB per GPU: the two language layers need 2 x (4 + 8) = 24 GiB at dp 2 x tp 4
    and 2 x (2 + 8) = 20 GiB at tp 8, which leaves nothing for the vision layer (at least 0.25 + 2 GiB);
    at dp 1 x tp 4 x cp 2 the sequence is halved: 2 x (4 + 4) = 16 GiB."""
    p = load_problem(LONG)
    vision = Layout.parse("dp8tp1")
    for language in ("dp2tp4", "dp1tp8"):
        plan = Plan((Stage.from_configs(0, 2, 8, [vision, Layout.parse(language)]),))
        with pytest.raises(PlanError) as err:
            evaluate(p, plan)
        assert err.value.rule == 6
    ev = evaluate(p, Plan((Stage.from_configs(0, 2, 8, [vision, Layout.parse("dp1tp4cp2")]),)))
    assert ev.stages[0].memory_bytes == (1 + 2 + 2 * (4 + 4)) * GiB


def test_long_context_optimum_by_hand():
    """With language at dp 1 x tp 4 x cp 2 (33 ms: 2 x (5.5 + 11)), the vision config decides, through its
    own time and the reshard of its 2.4e9-byte output (paid forward and backward; 300 GB/s NVLink, so one
    byte share s of it takes 2.4e9 s / 3e8 = 8 s ms on the busiest port):

    * dp 8: GPU r holds batch eighth r; it needs (all batch, sequence half r // 4, feature quarter r % 4) =
      1/8 and holds 1/64 of it: s = 7/64, r = 0.875 ms; t = 6 + 33 + 1.75 = 40.75 ms;
    * dp 4 x cp 2: GPU r holds (batch quarter r // 2, sequence half r % 2); GPU 1 holds nothing of its
      destination block (sequence half 0): s = 1/8, r = 1 ms; t = 6.6 + 33 + 2 = 41.6 ms;
    * dp 2 x tp 4: GPU r holds (batch half r // 4, feature quarter r % 4) and needs (sequence half r // 4,
      the same quarter): it holds half of it, s = 1/16, r = 0.5 ms; t = 9 + 33 + 1 = 43 ms.

    The optimum is 40.75 ms (bottleneck; the iteration estimate of one stage is m t = 163 ms).
    """
    p = load_problem(LONG)
    language = Layout.parse("dp1tp4cp2")
    by_hand = {"dp8tp1": (0.875, 40.75), "dp4tp1cp2": (1.0, 41.6), "dp2tp4": (0.5, 43.0)}
    for key, (r, t) in by_hand.items():
        ev = evaluate(p, Plan((Stage.from_configs(0, 2, 8, [Layout.parse(key), language]),)))
        assert ev.stages[0].reshard_ms == pytest.approx(r, rel=1e-12)
        assert ev.value == pytest.approx(t, rel=1e-12)
    for method, options in EXACT.items():
        for objective, value in (("bottleneck", 40.75), ("iteration", 163.0)):
            result = solve(p, method, objective=objective, options=options, seed=1)
            assert result.status == "optimal", (method, result.message)
            assert result.value == pytest.approx(value, rel=1e-9)
            assert result.plan.stages[0].configs == (Layout(8, 1), language)
            check_plan(p, result)
