"""One solver contract (issue 36): typed option records, capabilities, and the checks solve() makes once.

Every method registers a frozen options record whose every option is documented where it is declared and
checked in ``__post_init__``, and its capabilities; :func:`partitioner.solvers.solve` checks options,
capabilities and quick infeasibility before it dispatches. A bad option is one ProblemError naming it at
the API, and exit 2 with one line at the CLI, which parses ``-o key=value`` through the same records.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import math
import textwrap
from pathlib import Path

import pytest

import partitioner.solvers
from partitioner import ProblemError, load_problem, solve
from partitioner.core.deadline import Deadline
from partitioner.problem import Problem
from partitioner.solvers import (
    DEFAULT_METHOD,
    BruteOptions,
    CpsatOptions,
    DpOptions,
    MilpOptions,
    method_spec,
    methods,
)
from partitioner.solvers.base import method_options_from_text
from partitioner.solvers.options import MethodOptions, options_record
from tests.conftest import EXAMPLES, ROOT

TOY = EXAMPLES / "vla_toy_2x4.json"
RECORDS = (DpOptions, CpsatOptions, MilpOptions, BruteOptions)


def _field_docs(record: type) -> dict[str, str]:
    """Each field of ``record`` and the string literal declared right after it (its documentation)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(record)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, after in zip(body, body[1:]):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str):
                docs[node.target.id] = after.value.value
    return docs


def test_every_built_in_method_registers_a_record_and_capabilities():
    assert set(methods()) >= {"dp", "cpsat", "milp", "brute", "greedy", "uniform", "balanced"}
    for name in methods():
        spec = method_spec(name)
        assert issubclass(spec.options, MethodOptions)
        assert dataclasses.is_dataclass(spec.options) and spec.options.__dataclass_params__.frozen  # type: ignore[attr-defined]
    assert {m for m in methods() if method_spec(m).capabilities.exact} == {"dp", "cpsat", "milp", "brute"}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.__name__)
def test_every_option_is_documented_where_declared_and_in_the_methods_page(record):
    docs = _field_docs(record)
    page = (ROOT / "docs" / "methods.md").read_text()
    for f in dataclasses.fields(record):
        assert len(docs.get(f.name, "")) > 20, f"{record.__name__}.{f.name} has no documentation where declared"
        assert f"`{f.name}" in page, f"docs/methods.md does not list {record.method}'s option {f.name}"


BAD = [
    ("dp", "memory_budget_gb", -1), ("dp", "memory_budget_gb", math.nan), ("dp", "memory_budget_gb", math.inf),
    ("dp", "memory_budget_gb", 0), ("dp", "memory_budget_gb", "3"), ("dp", "threads", 0), ("dp", "threads", 2.5),
    ("dp", "threads", True), ("dp", "threads", 10**9), ("dp", "placement", "nodes"),
    ("cpsat", "num_workers", 0), ("cpsat", "resolution", 1.0), ("cpsat", "resolution", 0), ("cpsat", "hint", "yes"),
    ("cpsat", "formulation", "arc"), ("cpsat", "parameters", [1]), ("cpsat", "parameters", {"no_such_parameter": 1}),
    ("cpsat", "parameters", {"num_workers": "x"}), ("cpsat", "log", 1),
    ("milp", "backend", "gurobi"), ("milp", "threads", -2), ("milp", "presolve", None),
    ("brute", "max_combinations", 0), ("brute", "max_seconds", math.inf),
]


@pytest.mark.parametrize("method, name, value", BAD)
def test_a_bad_option_is_one_problem_error_naming_it(method, name, value):
    with pytest.raises(ProblemError) as err:
        solve(TOY, method, options={name: value})
    assert err.value.path.startswith(f"options.{name}"), str(err.value)
    assert method in str(err.value)


def test_an_unknown_option_or_a_non_mapping_is_refused_at_the_door():
    with pytest.raises(ProblemError, match="method dp has no option 'num_workers'"):
        solve(TOY, "dp", options={"num_workers": 2})
    with pytest.raises(ProblemError, match="mapping"):
        solve(TOY, "dp", options=[("threads", 1)])
    with pytest.raises(ProblemError, match="greedy has no option"):
        solve(TOY, "greedy", options={"hint": False})
    with pytest.raises(ProblemError, match="CpsatOptions"):
        solve(TOY, "dp", options=CpsatOptions())


def test_a_record_can_be_given_and_values_are_normalised():
    assert solve(TOY, "dp", options=DpOptions(threads=1)).status == "optimal"
    record = options_record(MilpOptions, "milp", {"backend": "CBC", "threads": 2})
    assert record == MilpOptions(backend="cbc", threads=2)
    assert options_record(DpOptions, "dp", {"memory_budget_gb": 8}).memory_budget_gb == 8.0


@pytest.mark.parametrize("text, expected", [
    ({"threads": "2", "memory_budget_gb": "1.5"}, DpOptions(threads=2, memory_budget_gb=1.5)),
    ({"threads": "null"}, DpOptions()),
])
def test_cli_text_is_parsed_by_the_fields_types(text, expected):
    assert method_options_from_text("dp", text) == expected


def test_cli_text_of_every_kind():
    record = method_options_from_text("cpsat", {"hint": "false", "log": "yes", "num_workers": "1",
                                                "parameters": '{"max_time_in_seconds": 3}', "formulation": "slot"})
    assert record == CpsatOptions(num_workers=1, hint=False, log=True, parameters={"max_time_in_seconds": 3},
                                  formulation="slot")
    with pytest.raises(ProblemError, match=r"options.hint: must be true or false"):
        method_options_from_text("cpsat", {"hint": "maybe"})
    with pytest.raises(ProblemError, match=r"options.threads: must be an integer"):
        method_options_from_text("dp", {"threads": "two"})


@pytest.mark.parametrize("option, words", [
    ("threads=0", "options.threads"), ("memory_budget_gb=-1", "options.memory_budget_gb"),
    ("memory_budget_gb=nan", "options.memory_budget_gb"), ("bogus=1", "no option 'bogus'"), ("threads", "key=value"),
])
def test_the_cli_refuses_a_bad_option_with_exit_2_and_one_line(cli, option, words):
    proc = cli("solve", str(TOY), "-o", option)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_the_api_and_the_cli_default_to_the_same_method(cli):
    assert DEFAULT_METHOD == "dp"
    assert solve(TOY).method == DEFAULT_METHOD
    proc = cli("solve", str(TOY), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["method"] == DEFAULT_METHOD


def _with(problem: Problem, **training) -> Problem:
    doc = problem.to_dict()
    doc["training"].update(training)
    return Problem.from_dict(doc)


def test_capabilities_are_checked_once_before_dispatch():
    toy = load_problem(TOY)
    doc = toy.to_dict()
    n = toy.num_devices
    doc["cluster"]["topology"] = {"edges": [[i, j, 100.0] for i in range(n) for j in range(i + 1, n)]}
    custom = Problem.from_dict(doc)
    for method in ("dp", "cpsat", "milp", "brute", "greedy", "balanced"):
        result = solve(custom, method)
        assert result.status == "error" and "custom cluster topologies" in result.message, method
    assert solve(custom, "uniform").status in ("feasible", "infeasible")  # it only evaluates its plans
    interleaved = _with(toy, schedule="interleaved", virtual_stages=2, microbatches=12)
    refused = solve(interleaved, "greedy")
    assert refused.status == "error" and "under schedule 'interleaved'" in refused.message
    assert "use dp or cpsat or milp or brute" in refused.message
    assert solve(interleaved, "dp").status in ("optimal", "feasible", "infeasible")  # dp plans it (its cut search)
    gpipe = solve(_with(toy, schedule="gpipe"), "uniform")
    assert gpipe.status == "error" and "use dp or cpsat or milp or brute" in gpipe.message


def test_quick_infeasibility_is_answered_at_the_door_for_every_method():
    doc = load_problem(TOY).to_dict()
    doc["cluster"]["gpu_memory_bytes"] = 1  # no layer fits anywhere
    problem = Problem.from_dict(doc)
    for method in methods():
        result = solve(problem, method)
        assert result.status == "infeasible" and "needs at least" in result.message, (method, result.message)


def test_solve_takes_a_deadline_and_holds_it():
    toy = load_problem(TOY)
    shared = Deadline(60.0)
    result = solve(toy, "dp", time_limit=shared)
    assert result.status == "optimal" and not shared.expired()
    spent = Deadline(1e-9)
    while not spent.expired():
        pass
    late = solve(toy, "cpsat", time_limit=spent)  # an expired deadline: the quickest answer, never a hang
    assert late.status in ("feasible", "optimal", "error")
    with pytest.raises(ProblemError, match="time limit"):
        solve(toy, "dp", time_limit=-1.0)


def test_no_method_repeats_the_door_s_topology_refusal():
    """The refusal of a custom topology is stated once, in solve()'s capability check (solvers/base.py)."""
    root = Path(inspect.getfile(partitioner.solvers)).parent
    stating = sorted(str(p.relative_to(root)) for p in root.rglob("*.py") if "custom cluster topolog" in p.read_text())
    assert stating == ["base.py"], f"the topology refusal is stated outside solve()'s door: {stating}"
