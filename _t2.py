import sys; sys.path.insert(0,'tests')
from hypothesis import given, settings, HealthCheck
from strategies import small_levels_problems
from partitioner import solve, evaluate
import pytest
n=[0]
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(small_levels_problems(schedules=("zb-h1", "gpipe")))
def t(problem):
    o=solve(problem,"brute"); r=solve(problem,"dp")
    assert o.status in ("optimal","infeasible"), o.message
    assert r.status==o.status, (o.status, r.status, r.message, o.message)
    if o.status=="optimal":
        assert r.value == pytest.approx(o.value, rel=1e-6), (r.value, o.value, problem.cluster)
        evaluate(problem, r.plan)
    n[0]+=1
t(); print("ok", n)
