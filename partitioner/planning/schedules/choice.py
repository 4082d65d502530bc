"""``plan`` picks the pipeline schedule: every candidate simulated, the fastest kept.

:func:`choose_schedule` takes what :func:`partitioner.planning.plan_model`
found under 1F1B -- the kept plan at its microbatch count m*, and for every
screened m the problems the baselines were built on -- and gathers, for each
allowed schedule key ``(schedule, v)`` (``1f1b``, ``zb-h1``, ``gpipe`` with
v = 1, ``interleaved`` with v = 2, 3, 4 by default):

More (the detail of this module): ``docs/internals/planning.md``, section ``partitioner.planning.schedules.choice``.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Mapping, Sequence, Union

from ...core.deadline import FIRST_PLAN_GRACE_SECONDS, Deadline
from ...plan import Evaluation, Plan, PlanError, SolveResult, evaluate
from ...problem import Problem, ProblemError
from ...simulate.engine import ReplaySummary
from ...solvers import SolverError
from ...solvers.base import schedule_support
from ...solvers.interleaved.search import round_balanced
from ..baselines import BASELINE_METHOD, FSDP_METHOD, MIN_INTERLEAVED_GROUPS, megatron_baselines
from ..options import SCHEDULE_CHOICES
from ..records import BaselineRun, KnobSolve, ScreenedCount
from ..results import simulate_plan
from .report import PlanSource, ScheduleCandidate, ScheduleReport, best_candidate, build_report
from .search import with_schedule

__all__ = ["SCHEDULE_CHOICES", "SCREENED_M", "schedule_keys", "choose_schedule", "busy_floor", "Resolve",
           "resolve_problem", "Admits"]

_PLAIN = ("1f1b", "zb-h1", "gpipe")
# the baselines under schedules other than 1F1B are built at the SCREENED_M microbatch counts with the best
# 1F1B screen and at every smaller m (fewer microbatches leave a larger bubble for a schedule to remove; the
# larger m, rarely fastest, cost the most to evaluate and replay)
SCREENED_M = 4
# Seconds the round-balanced interleaved plans of one key may take (their local search often stops earlier,
# at its local optimum).
BALANCED_SECONDS = 4.0

# (evaluation, replay, iteration ms) of a plan that runs, or why it cannot
Run = Union[tuple[Evaluation, Union[ReplaySummary, None], float], str]
# plan_model's solve with knobs: a screened count (the problem under a schedule) and the warm starts per knob setting
Resolve = Callable[[ScreenedCount, Mapping[str, Plan]], KnobSolve]
# plan --target: why the target cannot run a plan of a problem ([] when it can; planning.targets.rules.runs)
Admits = Callable[[Problem, Plan], Sequence[str]]


def schedule_keys(schedule: str = "auto", virtual_stages: int | None = None,
                  virtual: Sequence[int] = (2, 3, 4)) -> list[tuple[str, int]]:
    """The ``(schedule, v)`` pairs ``plan`` tries: all of them for ``auto``, else the pinned one's.

    ``schedule`` and ``virtual_stages`` are a :class:`~partitioner.planning.PlanOptions`'s,
    checked there.
    """
    keys = [(s, 1) for s in _PLAIN] + [("interleaved", v) for v in virtual]
    if schedule == "auto":
        return keys
    if schedule == "interleaved":
        return [("interleaved", v) for v in ((virtual_stages,) if virtual_stages else virtual)]
    return [(schedule, 1)]


def resolve_problem(problem: Problem, key: tuple[str, int]) -> Problem | None:
    """``problem`` under schedule key ``key`` as ``plan`` re-solves it, or None when that space is empty.

    Under ``interleaved`` the device groups P are at least
    :data:`~partitioner.planning.baselines.MIN_INTERLEAVED_GROUPS` (the
    frameworks run virtual stages on two pipeline ranks or more); the
    problem's own interleaved space (``stages.min`` may be 1) is what the
    exact methods answer on a problem file, unchanged.
    """
    prob = with_schedule(problem, *key)
    if key[0] != "interleaved":
        return prob
    if prob.stages.max < MIN_INTERLEAVED_GROUPS:
        return None
    low = max(prob.stages.min, MIN_INTERLEAVED_GROUPS)
    return replace(prob, stages=replace(prob.stages, min=low))


def _run(problem: Problem, plan: Plan, objective: str, simulate: bool, beat: float | None = None) -> Run | None:
    """(evaluation, replay, iteration ms) of ``plan`` on ``problem``, or why it cannot run.

    With ``beat`` (a simulated iteration, ms): None, without replaying, when the
    replay cannot be shorter than ``beat`` by the 1e-9 that :func:`best_candidate`
    asks: every device runs all its ops one at a time, so the makespan is at
    least m times the busiest device group's t (:func:`busy_floor`).
    """
    try:
        ev = evaluate(problem, plan, objective)
    except PlanError as err:
        return str(err)
    if simulate and beat is not None and busy_floor(ev) >= beat * (1 - 1e-9):
        return None
    sim = simulate_plan(problem, plan, ev) if simulate else None
    it = sim.makespan_ms if sim is not None and math.isfinite(sim.makespan_ms) else ev.iteration_ms
    return ev, sim, it


def busy_floor(ev: Evaluation) -> float:
    """A lower bound on the simulated makespan of an evaluated plan under any schedule: m x the busiest group's t.

    Each device group runs F, B (and W) of every microbatch on each of its
    chunks, one op at a time (``partitioner.simulate.engine``): m x sum of its
    chunks' t_c. The factor 1 - 1e-9 covers the rounding of the replay's sums.
    """
    return ev.microbatches * ev.bottleneck_ms * (1 - 1e-9)


def _candidate(source: PlanSource, method: str, key: tuple[str, int], problem: Problem, plan: Plan,
               run: Run) -> ScheduleCandidate:
    if isinstance(run, str):
        return ScheduleCandidate(source, method, key[0], key[1], problem, plan, reason=run)
    ev, sim, it = run
    return ScheduleCandidate(source, method, key[0], key[1], problem, plan, ev=ev, sim=sim, iteration_ms=it)


def _baseline_run(run: BaselineRun) -> Run:
    return run.ev, run.sim, run.iteration_ms


def _plain_replays(best: KnobSolve, keys: Sequence[tuple[str, int]], objective: str,
                   method: str, simulate: bool) -> list[ScheduleCandidate]:
    """The kept plan replayed under every plain schedule key."""
    problem, plan = best.problem, best.result.plan
    assert plan is not None
    out = []
    for key in keys:
        if key[0] not in _PLAIN:
            continue
        prob = with_schedule(problem, key[0])
        if key[0] == problem.training.schedule and best.result.evaluation is not None:
            run: Run | None = (best.result.evaluation, best.sim, best.iteration_ms)
        else:
            run = _run(prob, plan, objective, simulate)
        assert run is not None
        out.append(_candidate("plan", method, key, prob, plan, run))
    return out


def _resolved(entry: ScreenedCount, warm: Mapping[str, Plan], keys: Sequence[tuple[str, int]], method: str,
              objective: str, resolve: Resolve, deadline: Deadline,
              simulate: bool = True, admits: Admits | None = None) -> tuple[list[ScheduleCandidate], list[str]]:
    """The method re-run under every schedule it models (never 1F1B: that is the kept plan), while time is left;
    with ``dp`` under ``interleaved`` also the round-balanced plans of its cut search
    (:func:`~partitioner.solvers.interleaved.search.round_balanced`, at most :data:`BALANCED_SECONDS` per key).

    The round-balanced cuts choose each segment's mesh and knobs freely, so
    under ``plan --target`` (``admits``) those the target cannot run are dropped
    (``resolve`` already solves in the target's space)."""
    out: list[ScheduleCandidate] = []
    notes: list[str] = []
    for key in keys:
        if key[0] == "1f1b":
            continue
        if deadline.expired():
            deadline.cut(f"schedule choice: {method} not re-solved under", _key_name(key))
            continue
        why = schedule_support(method, key[0], objective)
        if why:
            note = f"{key[0]}: not re-solved: {why.split(';')[0]}"
            if note not in notes:
                notes.append(note)
            continue
        resolved = resolve_problem(entry.problem, key)
        if resolved is None:
            notes.append(f"{_key_name(key)}: not re-solved: fewer than {MIN_INTERLEAVED_GROUPS} device groups allowed")
            continue
        prob = resolved
        try:
            # the kept schedule's plans per knob setting start the re-solve (dp's zb-h1 search uses one)
            done = resolve(ScreenedCount(prob.microbatches, prob, prob), dict(warm))
        except (ProblemError, SolverError, ValueError) as err:
            notes.append(f"{key[0]} v={key[1]}: {method} could not run: {err}")
            continue
        r = done.result
        if r.plan is None or r.evaluation is None:
            notes.append(f"{key[0]} v={key[1]}: {method} found no plan" + (f" ({r.message})" if r.message else ""))
            continue
        cand = _candidate("solved", method, key, done.problem, r.plan, (r.evaluation, done.sim, done.iteration_ms))
        out.append(replace(cand, result=r))
    for key in keys:  # dp under interleaved: also plans whose rounds are balanced, which the estimate does not favour
        limit = deadline.solve_limit(BALANCED_SECONDS)
        if key[0] != "interleaved" or method != "dp" or limit == 0:
            continue
        resolved = resolve_problem(entry.problem, key)
        if resolved is None:
            continue
        prob = resolved
        for r in round_balanced(prob, objective, method, limit):
            if r.plan is None:
                continue
            refused = admits(prob, r.plan) if admits is not None else ()
            if refused:
                notes.append(f"{_key_name(key)}: a round-balanced {method} plan dropped: {refused[0]}")
                continue
            run = _run(prob, r.plan, objective, simulate)
            if run is not None and not isinstance(run, str):
                out.append(replace(_candidate("solved", method, key, prob, r.plan, run), result=r))
    return out, notes


def _leader(pool: Sequence[ScheduleCandidate], prune: bool) -> float | None:
    """The simulated iteration a new candidate must beat to become the pool's best (None: any)."""
    best = best_candidate(pool) if prune else None
    return None if best is None else best.iteration_ms


def _in_scope(key: tuple[str, int], m: int, top: int) -> bool:
    """Other schedules' baselines are built at the best screened m's and every smaller m; 1F1B's at every m."""
    return key == ("1f1b", 1) or m <= top


def _megatron_pool(e: ScreenedCount, key: tuple[str, int], prob: Problem, objective: str, simulate: bool,
                   pool: list[ScheduleCandidate], prune: bool, deadline: Deadline | None = None,
                   record: Deadline | None = None) -> None:
    """Add the Megatron-style candidates of screened count ``e`` under ``key`` to ``pool`` (the search stops at
    ``deadline``; ``record``, default ``deadline``, names the cut:
    :func:`~partitioner.planning.baselines.megatron_baselines`)."""
    if key == ("1f1b", 1):
        b = e.bases.get(BASELINE_METHOD)
        if b is not None:
            pool.append(_candidate("baseline", BASELINE_METHOD, key, prob, b.plan, _baseline_run(b)))
        return
    for plan, _ in megatron_baselines(prob, objective, keep=3 if key[0] == "interleaved" else 1, sums=e.stage_sums,
                                      deadline=deadline, record=record):
        run = _run(prob, plan, objective, simulate, _leader(pool, prune))
        if run is not None:  # None: slower than the pool's best so far, which it would not replace
            pool.append(_candidate("baseline", BASELINE_METHOD, key, prob, plan, run))


def _fsdp_pool(e: ScreenedCount, key: tuple[str, int], prob: Problem, objective: str, simulate: bool,
               pool: list[ScheduleCandidate], prune: bool) -> None:
    """Add the FSDP candidate of screened count ``e`` under ``key`` (plain schedules only) to ``pool``."""
    f = e.bases.get(FSDP_METHOD)
    if f is None or key[0] not in _PLAIN:
        return
    run = _baseline_run(f) if key == ("1f1b", 1) else _run(prob, f.plan, objective, simulate, _leader(pool, prune))
    if run is not None:
        pool.append(_candidate("fsdp", FSDP_METHOD, key, prob, f.plan, run))


def _no_baseline(name: str, key: tuple[str, int], pool: Sequence[ScheduleCandidate]) -> ScheduleCandidate:
    """The row saying why no plan of baseline ``name`` runs under ``key``."""
    why = pool[0].reason if pool else (
        "no uniform split into P >= 2 groups x v chunks with m a multiple of P fits at any screened m"
        if key[0] == "interleaved" else "no plan of this shape fits in memory at any screened m")
    return ScheduleCandidate("baseline" if name == BASELINE_METHOD else "fsdp", name, key[0], key[1], None, reason=why)


def _key_name(key: tuple[str, int]) -> str:
    return key[0] + (f" (v = {key[1]})" if key[0] == "interleaved" else "")


def _baselines(screened: Sequence[ScreenedCount], keys: Sequence[tuple[str, int]], objective: str,
               simulate: bool, prune: bool = True, deadline: Deadline | None = None,
               fallback_m: int | None = None) -> list[ScheduleCandidate]:
    """Per schedule key, the best Megatron-style uniform plan and the FSDP plan over every screened m.

    A pool keeps only its best candidate (:func:`best_candidate`, in enumeration
    order); with ``prune`` a candidate whose :func:`busy_floor` shows it cannot
    replace the best so far is not replayed (the result is the same). Once
    ``deadline`` has passed, only 1F1B's baselines (replayed by the screening)
    are still gathered, and at ``fallback_m`` those of every key: the run
    has no plan under its (pinned) schedules yet, and a uniform split at the
    kept count is the cheapest plan that runs there (its search stops at the
    first-plan grace past ``deadline``); the deadline records the rest left
    out.
    """
    deadline = deadline or Deadline(None)
    out = []
    ranked = sorted((e for e in screened if math.isfinite(e.screen)), key=lambda e: e.screen)
    top = max((e.m for e in ranked[:SCREENED_M]), default=0)
    for key in keys:
        megatron: list[ScheduleCandidate] = []
        fsdp: list[ScheduleCandidate] = []
        for e in (e for e in screened if _in_scope(key, e.m, top)):
            if key != ("1f1b", 1) and deadline.expired() and e.m != fallback_m:
                deadline.cut("schedule choice: baselines not built under", _key_name(key))
                continue
            prob = with_schedule(e.base_problem, *key)
            # the fallback count searches within the first-plan grace, as a run with no plan builds its counts
            limit = deadline.extended(FIRST_PLAN_GRACE_SECONDS) if e.m == fallback_m else deadline
            _megatron_pool(e, key, prob, objective, simulate, megatron, prune, limit, record=deadline)
            _fsdp_pool(e, key, prob, objective, simulate, fsdp, prune)
        for name, pool in ((BASELINE_METHOD, megatron), (FSDP_METHOD, fsdp)):
            found = best_candidate(pool)
            if found is not None:
                out.append(found)
            elif key[0] in _PLAIN or name == BASELINE_METHOD:
                out.append(_no_baseline(name, key, pool))
    return out


def choose_schedule(
    best: KnobSolve,
    screened: Sequence[ScreenedCount],
    *,
    method: str,
    objective: str,
    resolve: Resolve,
    keys: Sequence[tuple[str, int]],
    simulate: bool = True,
    pinned: bool = False,
    deadline: Deadline | None = None,
    admits: Admits | None = None,
) -> tuple[KnobSolve, dict[str, BaselineRun], ScheduleReport]:
    """Pick the schedule (and plan) with the least simulated iteration.

    Parameters
    ----------
    best : KnobSolve
        ``plan_model``'s kept plan under 1F1B (its ``problem`` at m*; its
        ``solved_plans`` start the re-solves).
    screened : sequence of ScreenedCount
        ``plan_model``'s screened microbatch counts (their 1F1B baselines and,
        optionally, the baselines' stage sums).
    method, objective : str
    resolve : callable
        ``plan_model``'s solve with knobs of a count under another schedule;
        used only for the schedules ``schedule_support`` allows.
    keys : sequence of (schedule, v)
        :func:`schedule_keys`.
    simulate : bool
        Replay the candidates (without it the estimates compare them).
    pinned : bool
        The user fixed the schedule (only its keys are tried).
    deadline : Deadline, optional
        The run's deadline: once it has passed, no re-solve starts and no
        baseline under another schedule than 1F1B is built (it records what was left out),
        except, when no candidate runs yet, the uniform splits at the kept plan's m.
    admits : callable, optional
        ``plan --target``: why the target cannot run a plan of a problem
        (:func:`partitioner.planning.targets.rules.runs` with its rules); a
        candidate found outside the target's space that it rejects is dropped.

    Returns
    -------
    best, baselines, report
        ``best`` with ``problem`` carrying the chosen schedule (``best``
        itself when nothing runs); ``baselines`` per baseline name its
        fastest candidate over the keys; ``report`` the ``schedules`` section.
    """
    deadline = deadline or Deadline(None)
    m_star = best.problem.microbatches
    entry = next((e for e in screened if e.m == m_star), None)
    cands = _plain_replays(best, keys, objective, method, simulate)
    solved, notes = (_resolved(entry, best.solved_plans, keys, method, objective, resolve, deadline, simulate, admits)
                     if entry is not None else ([], []))
    cands += solved
    # nothing runs yet (a pinned schedule the re-solves had no time for): the uniform splits at m* still count
    fallback_m = m_star if best_candidate(cands) is None else None
    cands += _baselines(screened, keys, objective, simulate, deadline=deadline, fallback_m=fallback_m)
    chosen = best_candidate(cands)
    if chosen is None:  # nothing runs under the pinned schedule
        return best, {}, build_report(cands, None, notes, pinned)
    bases: dict[str, BaselineRun] = {}
    for name in (BASELINE_METHOD, FSDP_METHOD):
        b = best_candidate([c for c in cands if c.method == name and c.source in ("baseline", "fsdp")])
        if b is not None and b.problem is not None and b.plan is not None and b.ev is not None:
            bases[name] = BaselineRun(b.problem, b.plan, b.ev, b.sim, b.iteration_ms)
    return _as_best(chosen, best, method), bases, build_report(cands, chosen, notes, pinned)


def _where(c: ScheduleCandidate) -> str:
    return c.schedule + (f" (v = {c.virtual_stages})" if c.schedule == "interleaved" else "")


def _chosen_result(c: ScheduleCandidate, best: KnobSolve, method: str) -> SolveResult:
    """The result of the chosen candidate, its message saying what was kept over the 1F1B plan."""
    old = best.result
    assert c.ev is not None and c.problem is not None
    ref = f"the {method} plan under {best.problem.training.schedule}: {best.iteration_ms:.6g} ms"
    if c.source == "solved" and c.result is not None:
        note = f"kept {method} re-solved under {_where(c)}: {c.iteration_ms:.6g} ms simulated ({ref})"
        return replace(c.result, message="; ".join(filter(None, [c.result.message, note])))
    if c.source == "plan":
        note = f"kept the {method} plan under {_where(c)}: {c.iteration_ms:.6g} ms simulated ({ref})"
        status = "feasible" if old.status == "optimal" else old.status  # optimal for 1F1B's objective, not this one
        return replace(old, status=status, value=c.ev.value, bound=None, evaluation=c.ev,
                       message="; ".join(filter(None, [old.message, note])))
    note = (f"kept the {c.method} baseline under {_where(c)} at m={c.problem.microbatches}, the fastest candidate: "
            f"{c.iteration_ms:.6g} ms simulated ({ref})")
    return SolveResult(status="feasible", method=method, objective=old.objective, value=c.ev.value,
                       solve_seconds=old.solve_seconds, message="; ".join(filter(None, [old.message, note])),
                       plan=c.plan, evaluation=c.ev)


def _as_best(c: ScheduleCandidate, best: KnobSolve, method: str) -> KnobSolve:
    """The chosen candidate as ``plan_model``'s kept plan."""
    if c.source == "plan" and c.schedule == best.problem.training.schedule:
        return best
    assert c.problem is not None
    return KnobSolve(c.problem, _chosen_result(c, best, method), c.sim, c.iteration_ms,
                     "simulator" if c.sim else "estimate")
