"""Integer times for CP-SAT: the one place the slot model's time unit is chosen.

CP-SAT needs integer coefficients. :func:`integer_times` scales every time
of the slot model (:mod:`.slot`) to integer units so that the model's
objective of any plan is within a known error of the truth, and
:func:`conservative_bound` turns a bound on the integer objective back into
a proven bound in milliseconds. Stage compute is formed from exactly rounded
prefix sums (rational arithmetic, no cancellation), and a known plan's stage
ceiling caps every coefficient, so sentinel costs (``fwd_ms: 1e18``) cost
neither range nor resolution.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from .schedule import T, ceiling_ms, error_terms, exact_part

if TYPE_CHECKING:
    from .data import SlotData

__all__ = ["RESOLUTION", "RESOLUTION_ZB_H1", "UNIT_CAP", "IntegerTimes", "stage_ceiling_ms", "integer_times", "conservative_bound"]

# Target relative accuracy of the integer time scale of CP-SAT: the plan it
# proves optimal is within this fraction of the true optimum (see integer_times).
RESOLUTION = 1e-7
# The default for ZB-H1's iteration model (two parts per stage, the W term switched per stage
# count): at 1e-7 CP-SAT 9.15 answered wrongly on 1 in about 1,000 random problems (INFEASIBLE,
# or "optimal" 82.08 for 17.87; tests/fixtures/regress_zb_h1_m1_*), at 1e-6 it agreed with
# brute on 3,000 (a 10x coarser unit keeps every time 10x smaller).
RESOLUTION_ZB_H1 = 1e-6

# Largest objective, in units, the integer model is built for: far inside
# CP-SAT's 64-bit range. A double carries a term of up to that many units to
# within 1/4 unit; integer_times counts that error (delta) in the model's error.
UNIT_CAP = 2.0**50
_EPS = 2.0**-52


@dataclass(frozen=True)
class IntegerTimes:
    """Times in integer units of ``1 / scale`` ms, for CP-SAT.

    Attributes
    ----------
    scale : float
        Units per millisecond.
    time_prefix : list of list of int
        Per layout, ``scale`` x the exact prefix sums of ``fwd_ms + bwd_ms``,
        rounded to the nearest unit (the sums are formed in exact rational
        arithmetic, so no cancellation: a 1e18 ms layer does not wipe out the
        ones after it). A segment's compute is a difference of two of them,
        off by at most 1 unit.
    tau : list of list of int
        Per layout and layer: the difference of consecutive ``time_prefix``
        entries, capped at ``top + 1`` (a layer that alone exceeds the
        ceiling can never be in a plan the model keeps).
    send : ndarray of int, shape (L + 1, sizes + 1, link kinds)
        ``send[c, s, h]``: the transfer into a slot starting at layer ``c``
        (so after layer ``c - 1``) when the smaller of the two stages has
        ``sizes[s - 1]`` devices and the link is kind ``h`` (see
        :attr:`~.data.SlotData.bandwidths`); 0 when ``c == 0`` or ``s == 0`` (no
        boundary), capped at ``top + 1``.
    reshard : tuple of dict
        Per group boundary, ``{(mu, nu): units}`` of the forward plus the
        backward reshard ``2 r`` (:attr:`~.data.SlotData.reshard_ms`), capped at ``top + 1``.
    top : int
        The largest stage time (units) the model allows: a plan with a
        slower stage is not modelled. Without a ceiling it is the largest
        possible stage time; with one (the hint's, see :func:`stage_ceiling_ms`)
        only plans that can beat the hint are kept.
    stage_error : float
        Most units by which a stage time of the model can differ from
        ``scale`` x its true time: 1 per segment (two rounded prefixes), and
        ``1/2 + delta`` per send and reshard term (rounding, plus ``delta``
        for the double precision of the term), so ``2 + 2 delta`` for a
        one-segment stage.
    error : float
        The same for the objective: ``stage_error`` times the number of stage
        terms the objective adds (:func:`.schedule.error_terms`): 1 for
        ``bottleneck``, ``J + m - 1`` for 1F1B's ``iteration``, ``J + m - 1 +
        k_max`` for ZB-H1's, ``2 (J + m - 1)`` for GPipe's. Every part's own
        error is at most ``stage_error`` (fewer segments' roundings, fewer sends).
    exact : bool
        The scale meets the requested resolution (False when the objective's
        range forced a coarser unit; the bound stays valid, but it may not
        prove optimality to the resolution).
    parts : dict
        For objectives made of several per-stage parts (:attr:`~.data.SlotData.parts`:
        ZB-H1's u and W, GPipe's F and B), ``{name: (time_prefix, tau)}`` of that
        part, built like ``time_prefix`` and ``tau`` (each is at most the stage
        time t, so the same ``top`` caps it); empty for t alone.
    reshard_once : tuple of dict
        ``reshard`` for one reshard ``r`` instead of ``2 r`` (GPipe's F and B each pay it once).
    float_terms : int
        Extra relative float error (in units of 2**-52) of the objective as
        :func:`~partitioner.plan.evaluate` computes it, for :func:`conservative_bound`:
        ZB-H1's u_c = t_c - W_c is a difference of float sums, off by up to about
        L eps (t_c + W_c), and sum_c W_c is at most J times the estimate, so 2 L J.
    """

    scale: float
    time_prefix: list[list[int]]
    tau: list[list[int]]
    send: np.ndarray
    reshard: tuple[dict, ...]
    top: int
    stage_error: float
    error: float
    exact: bool
    parts: dict = field(default_factory=dict)
    reshard_once: tuple = ()
    float_terms: int = 0


def stage_ceiling_ms(objective: str, value: float, microbatches: int, schedule: str = "1f1b") -> float:
    """The slowest stage a plan can have and still not be worse than a plan of objective ``value``.

    ``bottleneck`` is the slowest stage; 1F1B's ``iteration`` = sum + (m - 1) max >= m max;
    other schedules: :func:`.schedule.ceiling_ms`.
    """
    return ceiling_ms(schedule, objective, value, microbatches)


def integer_times(data: "SlotData", resolution: float = RESOLUTION, ceiling_ms: float | None = None, check=None) -> IntegerTimes:
    """Scale every time to integers -- the one place CP-SAT's resolution is chosen.

    CP-SAT needs integer coefficients. Each quantity is rounded to the
    nearest unit, so the model's objective of any plan is within ``error``
    units of the truth, and a plan the solver proves optimal (with an
    absolute gap limit of ``error`` units) is within ``3 * error`` units of
    the true optimum. The unit is chosen so that this is at most
    ``resolution`` times the analytic lower bound of the objective
    (:meth:`~.data.SlotData.lower_bound`), hence at most ``resolution`` relative to
    the true optimum -- unless the objective's upper bound would exceed
    :data:`UNIT_CAP` units, where the scale is capped and ``exact`` is
    False (the bound reported through :func:`conservative_bound` stays valid
    either way; ``cpsat`` then does not claim optimality unless the bound
    proves it).

    ``ceiling_ms`` (optional): no stage of the plans of interest is slower
    (:func:`stage_ceiling_ms` of a known plan). Times above it are capped, so
    that sentinel costs (``fwd_ms: 1e12``) neither blow up the range nor
    cost resolution.

    Consequence: two plans whose true objectives differ by less than about
    ``resolution`` (relative) can look equal, or swapped, to the solver, so
    ``cpsat`` may return a plan up to that fraction worse than the best one;
    with the default 1e-7 it agrees with the exact methods to 1e-6.
    """
    check = check or (lambda: None)
    J, m, L = data.slots, data.microbatches, data.num_layers
    groups = max(1, len(data.groups))
    # a first pass with delta = 1/1024, then delta from the actual magnitudes
    stage_error = groups + (groups + 1) * (0.5 + 2.0**-10)
    count = error_terms(data.schedule, data.objective, J, data.counts, m)
    lower = data.lower_bound()
    upper_stage = data.upper_stage_ms()
    if ceiling_ms is not None and math.isfinite(ceiling_ms):
        upper_stage = min(upper_stage, ceiling_ms)
    upper = count * upper_stage
    if upper <= 0:  # every time is zero (or the ceiling is): any unit is exact
        scale, exact = 1.0, True
    else:
        cap = UNIT_CAP / upper
        wanted = 3 * count * stage_error / (resolution * lower) if lower > 0 else math.inf
        scale, exact = (wanted, True) if wanted <= cap else (cap, False)
    top_units = scale * upper_stage + stage_error + 1
    delta = max(2.0**-10, 4 * _EPS * top_units)
    stage_error = groups + (groups + 1) * (0.5 + delta)
    top = int(math.ceil(top_units + 2 * delta + 1))
    prefix = _exact_prefixes(data, scale, check)
    tau = [[min(b - a, top + 1) for a, b in zip(row, row[1:])] for row in prefix]
    bws = data.bandwidths
    S = len(data.sizes)
    send = np.zeros((L + 1, S + 1, len(bws)), dtype=np.int64)
    if data.transfers:
        for c in range(1, L):
            if c % 4096 == 0:
                check()
            mb = data.send_mb[c - 1]
            if mb == 0:
                continue
            for s, d in enumerate(data.sizes, start=1):
                for h, bw in enumerate(bws):
                    send[c, s, h] = _units(scale, mb / (d * bw), top)
    reshard = tuple({pair: _units(scale, 2 * r, top) for pair, r in table.items()} for table in data.reshard_ms)
    parts: dict = {}
    once: tuple = ()
    float_terms = 0
    if data.parts != (T,):
        float_terms = 2 * L * J if any(part.name == "w" for part in data.parts) else 0
        for part in data.parts:
            rows = _exact_prefixes(data, scale, check, part)
            parts[part.name] = (rows, [[min(b - a, top + 1) for a, b in zip(row, row[1:])] for row in rows])
        once = tuple({pair: _units(scale, r, top) for pair, r in table.items()} for table in data.reshard_ms)
    return IntegerTimes(scale, prefix, tau, send, reshard, top, stage_error, count * stage_error, exact, parts, once, float_terms)


def _units(scale: float, ms: float, top: int) -> int:
    """``round(scale * ms)``, capped at ``top + 1``."""
    value = scale * ms
    return top + 1 if not value < top + 1 else int(round(value))


def _exact_prefixes(data: "SlotData", scale: float, check, part=None) -> list[list[int]]:
    """Per layout, ``round(scale * sum of (fwd + bwd) over layers < i)`` for i = 0..L, exactly
    (of ``part``'s layer cost instead, :func:`.schedule.exact_part`, when given).

    Every double is a rational with a power-of-two denominator; the sums are
    formed in integers over a common denominator, then scaled and rounded
    once (half up).
    """
    problem = data.problem
    index = {lay: k for k, lay in enumerate(data.layouts)}
    n, L = len(data.layouts), data.num_layers
    parts: list[list[tuple[int, int]]] = [[(0, 1)] * L for _ in range(n)]
    shift = 0
    for i, layer in enumerate(problem.layers):
        if i % 1024 == 0:
            check()
        for lay, c in layer.costs.items():
            if part is not None:
                exact = exact_part(part, c)
                parts[index[lay]][i] = (exact.numerator, exact.denominator)
                shift = max(shift, exact.denominator.bit_length() - 1)
                continue
            fn, fd = c.fwd_ms.as_integer_ratio() if isinstance(c.fwd_ms, float) else (int(c.fwd_ms), 1)
            bn, bd = c.bwd_ms.as_integer_ratio() if isinstance(c.bwd_ms, float) else (int(c.bwd_ms), 1)
            parts[index[lay]][i] = (fn * bd + bn * fd, fd * bd)
            shift = max(shift, (fd * bd).bit_length() - 1)
    den = 1 << shift
    sn, sd = float(scale).as_integer_ratio()
    out = []
    for k in range(n):
        check()
        total = 0
        row = [0]
        for num, d in parts[k]:
            total += num * (den // d)
            row.append((2 * total * sn + den * sd) // (2 * den * sd))
        out.append(row)
    return out


def conservative_bound(units: float, times: IntegerTimes, analytic: float, layers: int = 0) -> float:
    """A proven lower bound (ms) from a bound on the integer model's objective.

    Any plan's true objective is at least (model objective - error) / scale,
    so the true optimum is at least ``(units - error) / scale``; the result
    is nudged down (relative ``(layers + float_terms + 16) 2**-52``: the float
    sums of :func:`~partitioner.plan.evaluate` may sit that far below the
    exact ones) and never below the analytic bound (itself nudged down).
    """
    best = max((units - times.error) / times.scale, analytic)
    best *= 1 - (layers + times.float_terms + 16) * _EPS
    for _ in range(4):
        best = math.nextafter(best, -math.inf)
    return max(best, 0.0)
