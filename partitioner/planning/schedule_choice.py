"""``plan`` picks the pipeline schedule: every candidate simulated, the fastest kept.

:func:`choose_schedule` takes what :func:`partitioner.planning.plan_model`
found under 1F1B -- the kept plan at its microbatch count m*, and for every
screened m the problems the baselines were built on -- and gathers, for each
allowed schedule key ``(schedule, v)`` (``1f1b``, ``zb-h1``, ``gpipe`` with
v = 1, ``interleaved`` with v = 2, 3, 4 by default):

* ``plan``: the kept plan replayed under the schedule (same stages, the
  schedule's own memory rule; plain schedules only -- a plan of P unequal
  stages has no unique cut into P·v chunks);
* ``solved``: the method re-run under the schedule at m*, when
  :func:`partitioner.solvers.base.schedule_support` says it optimises that
  schedule's objective (checked at run time, so a solver that learns a
  schedule is used without a change here);
* ``baseline``: the Megatron-style uniform split under the schedule
  (:func:`partitioner.planning.megatron_baselines`; for ``interleaved``
  Megatron-LM's split with virtual stages), the best over every screened m,
  P, layout and knob setting -- what a Megatron-LM user would run with that
  schedule (1F1B: every screened m; the other schedules: the :data:`SCREENED_M`
  m's with the best 1F1B screen and every smaller m);
* ``fsdp``: the FSDP baseline (one stage) replayed under each plain schedule.

Every candidate is checked by :func:`partitioner.plan.evaluate` on the
problem carrying its schedule and replayed by the simulator; the one with the
least simulated iteration (the makespan) is kept, ties to the earlier
candidate (the kept plan under 1F1B first), so the result is never slower
than any candidate it reports, and never slower than ``plan`` under 1F1B
alone. The baselines are ranked by their estimate first (for ``interleaved``
the three best by estimate are simulated: its estimate is off by up to 25 %
on unequal chunks, ``DESIGN.md``). Replay is cheap (milliseconds); only the
methods that model a schedule are re-run, once per schedule key at m*.
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

from ..plan import Evaluation, Plan, PlanError, SolveResult, evaluate
from .baselines import BASELINE_METHOD, FSDP_METHOD, megatron_baselines
from .results import simulate_plan
from ..problem import Problem, ProblemError
from .schedule_search import with_schedule
from ..solvers import SolverError
from ..solvers.base import schedule_support

__all__ = ["SCHEDULE_CHOICES", "schedule_keys", "choose_schedule"]

SCHEDULE_CHOICES = ("auto", "1f1b", "zb-h1", "gpipe", "interleaved")
_PLAIN = ("1f1b", "zb-h1", "gpipe")
# the baselines under schedules other than 1F1B are built at the SCREENED_M microbatch counts with the best
# 1F1B screen and at every smaller m (fewer microbatches leave a larger bubble for a schedule to remove; the
# larger m, rarely fastest, cost the most to evaluate and replay)
SCREENED_M = 4


def schedule_keys(schedule: str = "auto", virtual_stages: int | None = None,
                  virtual: Sequence[int] = (2, 3, 4)) -> list[tuple[str, int]]:
    """The ``(schedule, v)`` pairs ``plan`` tries: all of them for ``auto``, else the pinned one's.

    Raises
    ------
    ProblemError
        An unknown schedule, or ``virtual_stages`` given without
        ``interleaved`` or below 2.
    """
    if schedule not in SCHEDULE_CHOICES:
        raise ProblemError(f"must be one of {', '.join(SCHEDULE_CHOICES)}, got {schedule!r}", path="schedule")
    if virtual_stages is not None:
        if schedule != "interleaved":
            raise ProblemError(f"virtual stages are for schedule 'interleaved' only (schedule is {schedule!r})",
                               path="virtual_stages")
        if isinstance(virtual_stages, bool) or not isinstance(virtual_stages, int) or virtual_stages < 2:
            raise ProblemError(f"the interleaved schedule needs virtual_stages >= 2, got {virtual_stages!r}",
                               path="virtual_stages")
    keys = [(s, 1) for s in _PLAIN] + [("interleaved", v) for v in virtual]
    if schedule == "auto":
        return keys
    if schedule == "interleaved":
        return [("interleaved", v) for v in ((virtual_stages,) if virtual_stages else virtual)]
    return [(schedule, 1)]


def _run(problem: Problem, plan: Plan, objective: str, simulate: bool,
         beat: float | None = None) -> tuple[Evaluation, dict | None, float] | str | None:
    """(evaluation, replay, iteration ms) of ``plan`` on ``problem``, or why it cannot run.

    With ``beat`` (a simulated iteration, ms): None, without replaying, when the
    replay cannot be shorter than ``beat`` by the 1e-9 that :func:`_best` asks:
    every device runs all its ops one at a time, so the makespan is at least
    m times the busiest device group's t (:func:`busy_floor`).
    """
    try:
        ev = evaluate(problem, plan, objective)
    except PlanError as err:
        return str(err)
    if simulate and beat is not None and busy_floor(ev) >= beat * (1 - 1e-9):
        return None
    sim = simulate_plan(problem, plan, ev) if simulate else None
    it = sim["makespan_ms"] if sim and math.isfinite(sim.get("makespan_ms", math.inf)) else ev.iteration_ms
    return ev, sim, it


def busy_floor(ev: Evaluation) -> float:
    """A lower bound on the simulated makespan of an evaluated plan under any schedule: m x the busiest group's t.

    Each device group runs F, B (and W) of every microbatch on each of its
    chunks, one op at a time (``partitioner.simulate.engine``): m x sum of its
    chunks' t_c. The factor 1 - 1e-9 covers the rounding of the replay's sums.
    """
    return ev.microbatches * ev.bottleneck_ms * (1 - 1e-9)


def _candidate(source: str, method: str, key: tuple[str, int], problem: Problem, plan: Plan, run: Any) -> dict[str, Any]:
    cand = {"source": source, "method": method, "schedule": key[0], "virtual_stages": key[1], "problem": problem,
            "plan": plan}
    if isinstance(run, str):
        return {**cand, "ok": False, "reason": run}
    ev, sim, it = run
    return {**cand, "ok": True, "ev": ev, "sim": sim, "iteration_ms": it}


def _row(c: Mapping[str, Any]) -> dict[str, Any]:
    row = {"schedule": c["schedule"], "virtual_stages": c["virtual_stages"], "plan_source": c["source"],
           "method": c["method"], "microbatches": c["problem"].microbatches if c.get("problem") else None, "ok": c["ok"]}
    if not c["ok"]:
        return {**row, "reason": c["reason"]}
    sim = c["sim"] or {}
    return {**row, "iteration_ms": c["iteration_ms"], "estimate_ms": c["ev"].iteration_ms,
            "bubble_ratio": sim.get("bubble_ratio"), "peak_memory_bytes": max(sim.get("peak_memory_bytes") or [0]) or None,
            "stages": len(c["plan"].stages)}


def _best(cands: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The first candidate with the least iteration (a later one must be faster by more than 1e-9 relative)."""
    best = None
    for c in cands:
        if c["ok"] and (best is None or c["iteration_ms"] < best["iteration_ms"] * (1 - 1e-9)):
            best = c
    return best


def _plain_replays(best: Mapping[str, Any], keys: Sequence[tuple[str, int]], objective: str,
                   method: str, simulate: bool) -> list[dict[str, Any]]:
    problem, plan = best["problem"], best["result"].plan
    out = []
    for key in keys:
        if key[0] not in _PLAIN:
            continue
        prob = with_schedule(problem, key[0])
        if key[0] == problem.training.schedule and best["result"].evaluation is not None:
            run: Any = (best["result"].evaluation, best["sim"], best["iteration_ms"])
        else:
            run = _run(prob, plan, objective, simulate)
        out.append(_candidate("plan", method, key, prob, plan, run))
    return out


def _resolved(entry: Mapping[str, Any], keys: Sequence[tuple[str, int]], method: str, objective: str,
              resolve: Callable[[dict[str, Any]], Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The method re-run under every schedule it models (never 1F1B: that is the kept plan)."""
    out, notes = [], []
    for key in keys:
        if key[0] == "1f1b":
            continue
        why = schedule_support(method, key[0], objective)
        if why:
            note = f"{key[0]}: not re-solved: {why.split(';')[0]}"
            if note not in notes:
                notes.append(note)
            continue
        prob = with_schedule(entry["problem"], *key)
        try:
            # the kept schedule's plans per knob setting start the re-solve (dp's zb-h1 search uses one)
            done = resolve({"problem": prob, "base_problem": prob, "bases": {}, "m": prob.microbatches,
                            "warm": dict(entry.get("solved_plans", {}))})
        except (ProblemError, SolverError, ValueError) as err:
            notes.append(f"{key[0]} v={key[1]}: {method} could not run: {err}")
            continue
        r: SolveResult = done["result"]
        if r is None or r.plan is None or r.evaluation is None:
            notes.append(f"{key[0]} v={key[1]}: {method} found no plan" + (f" ({r.message})" if r is not None and r.message else ""))
            continue
        cand = _candidate("solved", method, key, done["problem"], r.plan, (r.evaluation, done["sim"], done["iteration_ms"]))
        cand["result"] = r
        out.append(cand)
    return out, notes


def _leader(pool: Sequence[dict[str, Any]], prune: bool) -> float | None:
    """The simulated iteration a new candidate must beat to become the pool's :func:`_best` (None: any)."""
    best = _best(pool) if prune else None
    return None if best is None else best["iteration_ms"]


def _baselines(screened: Sequence[Mapping[str, Any]], keys: Sequence[tuple[str, int]], objective: str,
               simulate: bool, prune: bool = True) -> list[dict[str, Any]]:
    """Per schedule key, the best Megatron-style uniform plan and the FSDP plan over every screened m.

    A pool keeps only its best candidate (:func:`_best`, in enumeration order);
    with ``prune`` a candidate whose :func:`busy_floor` shows it cannot replace
    the best so far is not replayed (the result is the same).
    """
    out = []
    ranked = sorted((e for e in screened if math.isfinite(e["screen"])), key=lambda e: e["screen"])
    top = max((e["m"] for e in ranked[:SCREENED_M]), default=0)
    for key in keys:
        megatron: list[dict[str, Any]] = []
        fsdp: list[dict[str, Any]] = []
        for e in screened:
            if key != ("1f1b", 1) and e["m"] > top:
                continue  # other schedules' baselines: at the best screened m's and every smaller m
            prob = with_schedule(e["base_problem"], *key)
            if key == ("1f1b", 1) and e["bases"].get(BASELINE_METHOD) is not None:
                b = e["bases"][BASELINE_METHOD]
                megatron.append(_candidate("baseline", BASELINE_METHOD, key, prob, b["plan"], (b["ev"], b["sim"], b["iteration_ms"])))
            elif key != ("1f1b", 1):
                for plan, _ in megatron_baselines(prob, objective, keep=3 if key[0] == "interleaved" else 1,
                                                  sums=e.get("stage_sums")):
                    run = _run(prob, plan, objective, simulate, _leader(megatron, prune))
                    if run is not None:  # None: slower than the pool's best so far, which it would not replace
                        megatron.append(_candidate("baseline", BASELINE_METHOD, key, prob, plan, run))
            f = e["bases"].get(FSDP_METHOD)
            if f is not None and key[0] in _PLAIN:
                run = (f["ev"], f["sim"], f["iteration_ms"]) if key == ("1f1b", 1) else _run(
                    prob, f["plan"], objective, simulate, _leader(fsdp, prune))
                if run is not None:
                    fsdp.append(_candidate("fsdp", FSDP_METHOD, key, prob, f["plan"], run))
        for name, pool in ((BASELINE_METHOD, megatron), (FSDP_METHOD, fsdp)):
            found = _best(pool)
            if found is not None:
                out.append(found)
            elif key[0] in _PLAIN or name == BASELINE_METHOD:
                why = pool[0]["reason"] if pool else (
                    "no uniform split into P >= 2 groups x v chunks with m a multiple of P fits at any screened m"
                    if key[0] == "interleaved" else "no plan of this shape fits in memory at any screened m")
                out.append({"source": "baseline" if name == BASELINE_METHOD else "fsdp", "method": name, "schedule": key[0],
                            "virtual_stages": key[1], "problem": None, "ok": False, "reason": why})
    return out


def choose_schedule(
    best: Mapping[str, Any],
    screened: Sequence[Mapping[str, Any]],
    *,
    method: str,
    objective: str,
    resolve: Callable[[dict[str, Any]], Mapping[str, Any]],
    keys: Sequence[tuple[str, int]],
    simulate: bool = True,
    pinned: bool = False,
) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any]]:
    """Pick the schedule (and plan) with the least simulated iteration.

    Parameters
    ----------
    best : mapping
        ``plan_model``'s kept candidate under 1F1B: ``problem`` (at m*),
        ``result``, ``sim``, ``iteration_ms``.
    screened : sequence of mapping
        ``plan_model``'s screened microbatch counts: ``m``, ``problem``,
        ``base_problem`` and ``bases`` (the 1F1B baselines), optionally
        ``stage_sums`` (the baselines' :class:`~partitioner.planning.baselines.StageSums`
        on ``base_problem``).
    method, objective : str
    resolve : callable
        Runs ``method`` on an entry ``{"problem", "base_problem", "bases", "m"}``
        (``plan_model``'s solve with knobs); used only for the schedules
        ``schedule_support`` allows.
    keys : sequence of (schedule, v)
        :func:`schedule_keys`.
    simulate : bool
        Replay the candidates (without it the estimates compare them).
    pinned : bool
        The user fixed the schedule (only its keys are tried).

    Returns
    -------
    best, baselines, report
        ``best`` in ``plan_model``'s candidate form with ``problem`` carrying
        the chosen schedule; ``baselines`` per baseline name its fastest
        candidate over the keys (``entry``, ``plan``, ``ev``, ``sim``,
        ``iteration_ms``); ``report`` the ``schedules`` section of the
        result: ``chosen``, ``rows`` (every candidate, fastest first, those
        that cannot run last), ``by_schedule`` (per key the best plan row and
        the best baseline row), ``best``, ``best_baseline`` and ``notes``.
    """
    m_star = best["problem"].microbatches
    entry = next((e for e in screened if e["m"] == m_star), None)
    cands = _plain_replays(best, keys, objective, method, simulate)
    solved, notes = _resolved(entry, keys, method, objective, resolve) if entry is not None else ([], [])
    cands += solved
    cands += _baselines(screened, keys, objective, simulate)
    chosen = _best(cands)
    if chosen is None:  # nothing runs under the pinned schedule
        return dict(best), {}, _report(cands, None, notes, pinned)
    new_best = _as_best(chosen, best, method)
    bases: dict[str, dict[str, Any]] = {}
    for name in (BASELINE_METHOD, FSDP_METHOD):
        b = _best([c for c in cands if c["method"] == name and c["source"] in ("baseline", "fsdp")])
        if b is not None:
            bases[name] = {"entry": {"m": b["problem"].microbatches, "base_problem": b["problem"]}, "plan": b["plan"],
                           "ev": b["ev"], "sim": b["sim"], "iteration_ms": b["iteration_ms"]}
    return new_best, bases, _report(cands, chosen, notes, pinned)


def _as_best(c: Mapping[str, Any], best: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The chosen candidate as ``plan_model``'s kept candidate."""
    src = "simulator" if c["sim"] else "estimate"
    old: SolveResult = best["result"]
    if c["source"] == "plan" and c["schedule"] == best["problem"].training.schedule:
        return {**best}
    where = c["schedule"] + (f" (v = {c['virtual_stages']})" if c["schedule"] == "interleaved" else "")
    ref = f"the {method} plan under {best['problem'].training.schedule}: {best['iteration_ms']:.6g} ms"
    if c["source"] == "solved":
        result = c["result"]
        note = f"kept {method} re-solved under {where}: {c['iteration_ms']:.6g} ms simulated ({ref})"
        result = replace(result, message="; ".join(filter(None, [result.message, note])))
    elif c["source"] == "plan":
        note = f"kept the {method} plan under {where}: {c['iteration_ms']:.6g} ms simulated ({ref})"
        status = "feasible" if old.status == "optimal" else old.status  # optimal for 1F1B's objective, not this one
        result = replace(old, status=status, value=c["ev"].value, bound=None, evaluation=c["ev"],
                         message="; ".join(filter(None, [old.message, note])))
    else:
        note = (f"kept the {c['method']} baseline under {where} at m={c['problem'].microbatches}, the fastest candidate: "
                f"{c['iteration_ms']:.6g} ms simulated ({ref})")
        result = SolveResult(status="feasible", method=method, objective=old.objective, value=c["ev"].value,
                             solve_seconds=old.solve_seconds, message="; ".join(filter(None, [old.message, note])),
                             plan=c["plan"], evaluation=c["ev"])
    return {"problem": c["problem"], "result": result, "sim": c["sim"], "iteration_ms": c["iteration_ms"],
            "iteration_source": src}


def _short(reason: str) -> str:
    """A table cell for why a candidate cannot run."""
    return "does not fit in memory" if reason.startswith("rule 6") or "fits in memory" in reason else "cannot run"


def _report(cands: Sequence[dict[str, Any]], chosen: Mapping[str, Any] | None, notes: list[str],
            pinned: bool) -> dict[str, Any]:
    ordered = sorted(cands, key=lambda c: (not c["ok"], c.get("iteration_ms", 0.0)))
    keys: list[tuple[str, int]] = []
    for c in cands:
        if (c["schedule"], c["virtual_stages"]) not in keys:
            keys.append((c["schedule"], c["virtual_stages"]))
    by_schedule = []
    for key in keys:
        mine = [c for c in cands if (c["schedule"], c["virtual_stages"]) == key]
        plan = _best([c for c in mine if c["source"] in ("plan", "solved")])
        base = _best([c for c in mine if c["source"] in ("baseline", "fsdp")])
        entry = {"schedule": key[0], "virtual_stages": key[1], "plan": _row(plan) if plan else None,
                 "baseline": _row(base) if base else None}
        for side, sources, found in (("plan", ("plan", "solved"), plan), ("baseline", ("baseline", "fsdp"), base)):
            failed = [c for c in mine if c["source"] in sources and not c["ok"]]
            if found is None and failed:
                entry[f"{side}_reason"] = _short(failed[0]["reason"])
        by_schedule.append(entry)

    def public(c: Mapping[str, Any] | None) -> dict[str, Any] | None:
        return None if c is None else {**_row(c), "plan": c["plan"].to_dict(c["ev"])}

    return {
        "chosen": None if chosen is None else {k: _row(chosen)[k] for k in ("schedule", "virtual_stages", "plan_source", "method")},
        "pinned": pinned,
        "rows": [_row(c) for c in ordered],
        "by_schedule": by_schedule,
        "best": public(chosen),
        "best_baseline": public(_best([c for c in cands if c["source"] in ("baseline", "fsdp")])),
        "notes": notes,
    }
