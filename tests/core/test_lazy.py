"""``import partitioner`` and a ``dp`` solve load none of the heavy solver back-ends (``partitioner.core.lazy``);
the methods that need them load them on first use and answer as before."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from partitioner.core.lazy import lazy_module

HEAVY = ("ortools.sat.python.cp_model", "pulp", "networkx")

SCRIPT = """
import json, sys
from partitioner import load_problem, solve
import partitioner.cli  # the CLI's own imports too
toy = load_problem(sys.argv[1])
def loaded(name):
    m = sys.modules.get(name)
    return m is not None and type(m).__name__ != "_LazyModule"
before = {name: loaded(name) for name in %r}
dp = solve(toy, "dp")
after_dp = {name: loaded(name) for name in %r}
pandas = "pandas" in sys.modules
cpsat = solve(toy, "cpsat", options={"num_workers": 1})
milp = solve(toy, "milp")
print(json.dumps({"before": before, "after_dp": after_dp, "pandas": pandas,
                  "values": [dp.value, cpsat.value, milp.value],
                  "after": {name: loaded(name) for name in %r}}))
""" % (HEAVY, HEAVY, HEAVY)


@pytest.mark.slow
def test_dp_loads_no_solver_back_end_and_the_others_load_theirs_on_use(examples: Path):
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(examples / "vla_toy_2x4.json")],
                         capture_output=True, text=True, check=True, cwd=Path(__file__).parents[2])
    got = json.loads(out.stdout)
    assert not any(got["before"].values()) and not any(got["after_dp"].values())
    assert not got["pandas"]  # OR-Tools' cp_model imports pandas: not loaded for a dp solve
    assert got["after"]["ortools.sat.python.cp_model"] and got["after"]["pulp"]
    dp, cpsat, milp = got["values"]
    assert cpsat == pytest.approx(dp, rel=1e-7) and milp == pytest.approx(dp, rel=1e-7)


def test_a_missing_module_fails_at_once():
    with pytest.raises(ModuleNotFoundError):
        lazy_module("partitioner_no_such_module_here")
    assert lazy_module("json") is sys.modules["json"]  # an imported module is returned as it is
