"""Lower bounds on the objective from the layer costs alone, for every method (no tables, no search).

:func:`analytic_bound` is the bound the exact methods report when the time limit leaves them no search of
their own (``cpsat`` and ``milp`` before their model, ``dp`` before its tables), and the floor of their
integer models.
"""
from __future__ import annotations

from ..problem import Problem

__all__ = ["analytic_bound"]


def analytic_bound(problem: Problem, objective: str, nudge: bool = True) -> float:
    """A lower bound on ``objective`` over every plan (nudged down unless ``nudge`` is false); what
    :meth:`partitioner.solvers.slot.data.SlotData.lower_bound` gives, without building the tables.

    Under the problem's schedule: ZB-H1's and GPipe's iteration estimates
    get their own bound (:func:`_zb_h1_bound`, :func:`_gpipe_bound`); 1F1B's
    bound does not hold for ZB-H1 (its W's hide in the bubble).
    """
    fastest, work = [], 0.0
    for layer in problem.layers:
        fastest.append(min(c.fwd_ms + c.bwd_ms for c in layer.costs.values()))
        work += min(lay.devices * (c.fwd_ms + c.bwd_ms) for lay, c in layer.costs.items())
    bottleneck = max(max(fastest), work / problem.num_devices)
    m = problem.microbatches
    value = bottleneck if objective == "bottleneck" else max(m * bottleneck, sum(fastest) + (m - 1) * bottleneck)
    schedule = problem.training.schedule
    if objective == "iteration" and schedule == "zb-h1":
        value = _zb_h1_bound(problem)
    elif objective == "iteration" and schedule == "gpipe":
        value = max(value, _gpipe_bound(problem))
    return max(0.0, value * (1 - 1e-12)) if nudge else value


def _zb_h1_bound(problem: Problem) -> float:
    """A lower bound on ZB-H1's ``sum u + max_c [(m - 1) u_c + k W_c]`` from the layer costs.

    ``sum u`` is at least the layers' least u; with k >= k_lo = max(m - P_max + 1, 1)
    (P_max the most stages possible), stage c's ``X_c = (m - 1) u_c + k W_c`` is at
    least each of its layers' least ``(m - 1) u + k_lo W``, and ``max X >= sum_c d_c
    X_c / N`` (the sizes d_c sum to N) is at least the layers' least device-weighted
    ``(m - 1) u + k_lo W`` over N. Sends and reshards only add to u.
    """
    m, N = problem.microbatches, problem.num_devices
    k = max(m - min(problem.stages.max, problem.num_layers, N) + 1, 1)
    least_u, peak, work = 0.0, 0.0, 0.0
    for layer in problem.layers:
        parts = [(lay.devices, c.fwd_ms + c.bwd_ms - c.split()[1], c.split()[1]) for lay, c in layer.costs.items()]
        least_u += min(u for _, u, _ in parts)
        peak = max(peak, min((m - 1) * u + k * w for _, u, w in parts))
        work += min(d * ((m - 1) * u + k * w) for d, u, w in parts)
    return least_u + max(peak, work / N)


def _gpipe_bound(problem: Problem) -> float:
    """A lower bound on GPipe's ``sum F + (m-1) max F + sum B + (m-1) max B``: each flow
    shop on its own, with the bottleneck bound (slowest layer, work over N) for each max."""
    m, N = problem.microbatches, problem.num_devices
    value = 0.0
    for pick in (lambda c: c.fwd_ms, lambda c: c.bwd_ms):
        least = [min(pick(c) for c in layer.costs.values()) for layer in problem.layers]
        work = sum(min(lay.devices * pick(c) for lay, c in layer.costs.items()) for layer in problem.layers)
        value += sum(least) + (m - 1) * max(max(least), work / N)
    return value
