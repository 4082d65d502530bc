"""Solver-quality comparison over a batch results file: tables and performance profiles.

The records of :mod:`partitioner.batch` are grouped into *instances* -- one
problem (by content hash) under one objective -- and, within an instance,
by method label (the method and the options the sweep gave it; the last
record of a job counts when a job was retried).

Per instance, the *best known value* is the smallest objective value any
method reached; a method's *gap* on it is ``(value - best) / |best|`` (0
when within ``tol`` relative, absolute when ``best`` is 0). The instance is
*feasible* when some method found a plan, *infeasible* when none did and
some method said ``infeasible``, and *unknown* otherwise.

More (the detail of this module): ``docs/internals/batch.md``, section ``partitioner.batch.compare``.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..problem import ProblemError
from . import FAILED, latest_records, read_results

__all__ = [
    "SOLVED",
    "EXACT_METHODS",
    "Entry",
    "ProblemRow",
    "MethodStats",
    "Comparison",
    "compare",
    "compare_file",
    "performance_profile",
    "plot_profile",
    "to_markdown",
    "summary_rows",
    "problem_rows",
    "format_entry",
    "format_gap",
    "format_seconds",
    "plan_layouts",
]

SOLVED = ("optimal", "feasible")
DEFAULT_TOL = 1e-9  # relative: two values this close are the same optimum (as solvers.base.REL_TOL)
MIN_SECONDS = 1e-6  # floor for times in the geometric mean and the profile ratios
# Methods whose "infeasible" is a proof (the exact solvers of DESIGN.md).
EXACT_METHODS = frozenset({"cpsat", "milp", "dp", "brute"})


@dataclass(frozen=True)
class Entry:
    """One method's result on one instance."""

    status: str
    value: float | None
    bound: float | None
    gap: float | None  # to the instance's best known value
    seconds: float
    message: str = ""

    @property
    def solved(self) -> bool:
        return self.status in SOLVED and self.value is not None


@dataclass(frozen=True)
class ProblemRow:
    """One instance (a problem under one objective) and every method's result on it."""

    problem: str
    objective: str
    problem_hash: str
    best_value: float | None
    best_bound: float | None
    verdict: str  # feasible | infeasible | unknown
    entries: Mapping[str, Entry]
    best_layout: str = ""  # format v3: the layouts of the best plan (stages " | ", segments "+"), when it has cp/ep/etp

    def to_dict(self) -> dict[str, Any]:
        return {
            "problem": self.problem,
            "objective": self.objective,
            "problem_hash": self.problem_hash,
            "best_value": self.best_value,
            "best_bound": self.best_bound,
            "verdict": self.verdict,
            **({"best_layout": self.best_layout} if self.best_layout else {}),
            "results": {
                label: {
                    "status": e.status,
                    "value": e.value,
                    "bound": e.bound,
                    "gap": e.gap,
                    "seconds": e.seconds,
                }
                for label, e in self.entries.items()
            },
        }


@dataclass(frozen=True)
class MethodStats:
    """One method's summary over every instance it ran on."""

    jobs: int
    solved: int
    optimal: int
    infeasible: int
    infeasible_agreed: int
    infeasible_disputed: int
    errors: int
    timeouts: int
    mean_gap: float | None
    max_gap: float | None
    geomean_seconds: float | None
    wins: int
    conflicts: int

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.__dataclass_fields__}


@dataclass(frozen=True)
class Comparison:
    methods: Mapping[str, MethodStats]
    problems: tuple[ProblemRow, ...]
    conflicts: tuple[Mapping[str, Any], ...] = ()
    tol: float = DEFAULT_TOL
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """``{"methods": {NAME: {...}}, "problems": [...], "conflicts": [...]}``."""
        return {
            "methods": {label: stats.to_dict() for label, stats in self.methods.items()},
            "problems": [row.to_dict() for row in self.problems],
            "conflicts": [dict(c) for c in self.conflicts],
            "tolerance": self.tol,
        }


# --------------------------------------------------------------------------- computing the comparison


def _seconds(record: Mapping[str, Any]) -> float:
    seconds = record.get("solve_seconds")
    if seconds is None:
        seconds = record.get("wall_seconds")
    return max(MIN_SECONDS, float(seconds or 0.0))


def _charged_seconds(record: Mapping[str, Any], seconds: float) -> float:
    """The time a job counts for in the mean: a failed job is charged its time limit, if it had one."""
    limit = record.get("time_limit")
    if record.get("status") in FAILED and limit:
        return max(seconds, float(limit))
    return seconds


def _gap(value: float, best: float, tol: float) -> float:
    scale = abs(best) if best != 0 else 1.0
    gap = (value - best) / scale
    return 0.0 if gap <= tol else gap


def compare(records: Iterable[Mapping[str, Any]], *, tol: float = DEFAULT_TOL, source: str | None = None) -> Comparison:
    """Compare the methods of a batch's records (see the module docstring for every definition).

    Parameters
    ----------
    records : iterable of dict
        Batch result records (``key``, ``problem``, ``method``, ``status``,
        ``value``, ``bound``, ``solve_seconds``, ...). When a key occurs
        more than once the last record counts.
    tol : float
        Relative tolerance under which two values are the same.
    """
    latest = list(latest_records(records).values())
    if not latest:
        raise ProblemError("holds no result records", source=source)
    instances: dict[tuple[str, str], dict[str, Mapping[str, Any]]] = defaultdict(dict)
    names: dict[tuple[str, str], str] = {}
    for record in latest:
        ident = (str(record.get("problem_hash") or record.get("problem")), str(record.get("objective")))
        label = str(record.get("label") or record.get("method"))
        instances[ident][label] = record  # later records of the same (instance, label) replace earlier ones
        names.setdefault(ident, str(record.get("problem")))
    labels = sorted({str(r.get("label") or r.get("method")) for r in latest})

    # the same problem name with different content (an edited file): tell the rows apart
    by_name: dict[tuple[str, str], list[tuple[str, str]]] = defaultdict(list)
    for ident in instances:
        by_name[(names[ident], ident[1])].append(ident)
    display = {
        ident: names[ident] if len(by_name[(names[ident], ident[1])]) == 1 else f"{names[ident]} [{ident[0][:8]}]"
        for ident in instances
    }

    rows: list[ProblemRow] = []
    conflicts: list[dict[str, Any]] = []
    per_method: dict[str, list[tuple[Entry, str]]] = defaultdict(list)  # (entry, verdict)
    charged: dict[str, list[float]] = defaultdict(list)
    wins: dict[str, int] = defaultdict(int)
    conflict_count: dict[str, int] = defaultdict(int)
    for ident, by_label in instances.items():
        values = [float(r["value"]) for r in by_label.values() if r.get("status") in SOLVED and r.get("value") is not None]
        bounds = [float(r["bound"]) for r in by_label.values() if r.get("bound") is not None]
        best = min(values) if values else None
        if best is not None:
            verdict = "feasible"
        elif any(r.get("status") == "infeasible" for r in by_label.values()):
            verdict = "infeasible"
        else:
            verdict = "unknown"
        entries: dict[str, Entry] = {}
        for label, r in by_label.items():
            status = str(r.get("status"))
            value = float(r["value"]) if status in SOLVED and r.get("value") is not None else None
            bound = float(r["bound"]) if r.get("bound") is not None else None
            gap = _gap(value, best, tol) if value is not None and best is not None else None
            entry = Entry(status, value, bound, gap, _seconds(r), str(r.get("message") or ""))
            entries[label] = entry
            per_method[label].append((entry, verdict))
            charged[label].append(_charged_seconds(r, entry.seconds))
            what = _conflict(entry, r, best, tol) if best is not None else None
            if what:
                conflict_count[label] += 1
                conflicts.append({"problem": display[ident], "objective": ident[1], "method": label, "conflict": what})
        best_layout = ""
        if best is not None:
            reached = [(e.seconds, label) for label, e in entries.items() if e.gap == 0.0]
            fastest = min(s for s, _ in reached)
            for s, label in reached:
                if s <= fastest:
                    wins[label] += 1
            best_layout = plan_layouts(by_label[min(reached)[1]].get("plan"))
        rows.append(
            ProblemRow(
                problem=display[ident],
                objective=ident[1],
                problem_hash=ident[0],
                best_value=best,
                best_bound=max(bounds) if bounds else None,
                verdict=verdict,
                entries={label: entries[label] for label in labels if label in entries},
                best_layout=best_layout,
            )
        )
    rows.sort(key=lambda row: (row.problem, row.objective))

    methods = {
        label: _method_stats(per_method[label], charged[label], wins[label], conflict_count[label]) for label in labels
    }
    return Comparison(methods, tuple(rows), tuple(conflicts), tol, source)


def plan_layouts(plan: Any) -> str:
    """The layouts of a plan document, ``dp2tp1cp4+dp2tp4 | dp4tp2ep8`` (stages ``|``, segments ``+``),
    when some config has a format-v3 axis (cp, ep or etp other than 1); "" otherwise or without a plan."""
    if not isinstance(plan, Mapping) or not isinstance(plan.get("stages"), list):
        return ""
    stages, v3 = [], False
    for stage in plan["stages"]:
        if not isinstance(stage, Mapping):
            return ""
        configs = stage.get("configs") or [stage]
        keys = []
        for c in configs:
            if not isinstance(c, Mapping):
                return ""
            axes = {a: c.get(a, 1) for a in ("cp", "ep", "etp")}
            v3 = v3 or any(v != 1 for v in axes.values())
            key = f"dp{c.get('dp')}tp{c.get('tp')}" + "".join(f"{a}{v}" for a, v in axes.items() if v != 1)
            keys.append(key + (f"/{c['variant']}" if c.get("variant") else ""))
        stages.append("+".join(dict.fromkeys(keys)))
    return " | ".join(stages) if v3 else ""


def _conflict(entry: Entry, record: Mapping[str, Any], best: float, tol: float) -> str | None:
    """What is impossible about a result, given that a plan of value ``best`` exists; None if nothing."""
    limit = best + tol * max(1.0, abs(best))
    if entry.status == "optimal" and entry.value is not None and entry.value > limit:
        return f"claims optimal {entry.value:.9g} but a plan of {best:.9g} exists"
    if entry.bound is not None and entry.bound > limit:
        return f"lower bound {entry.bound:.9g} is above a plan of {best:.9g}"
    if entry.status == "infeasible" and _claims_proof(record):
        return f"claims infeasible but a plan of {best:.9g} exists"
    return None


def _method_stats(items: Sequence[tuple[Entry, str]], times: Sequence[float], wins: int, conflicts: int) -> MethodStats:
    """One method's summary from its (entry, instance verdict) pairs and its charged times."""
    gaps = [e.gap for e, _ in items if e.gap is not None]
    return MethodStats(
        jobs=len(items),
        solved=sum(e.solved for e, _ in items),
        optimal=sum(e.status == "optimal" for e, _ in items),
        infeasible=sum(e.status == "infeasible" for e, _ in items),
        infeasible_agreed=sum(e.status == "infeasible" and v == "infeasible" for e, v in items),
        infeasible_disputed=sum(e.status == "infeasible" and v == "feasible" for e, v in items),
        errors=sum(e.status == "error" for e, _ in items),
        timeouts=sum(e.status == "timeout" for e, _ in items),
        mean_gap=sum(gaps) / len(gaps) if gaps else None,
        max_gap=max(gaps) if gaps else None,
        geomean_seconds=math.exp(sum(math.log(t) for t in times) / len(times)) if times else None,
        wins=wins,
        conflicts=conflicts,
    )


def _claims_proof(record: Mapping[str, Any]) -> bool:
    """Whether a record's ``infeasible`` is a proof: it comes from an exact method.

    Heuristics (greedy) say ``infeasible`` when they fail, which proves
    nothing; their disputed claims are counted but are not conflicts.
    """
    return str(record.get("method")) in EXACT_METHODS


def compare_file(path: str | Path, *, tol: float = DEFAULT_TOL, source: str | None = None) -> Comparison:
    """:func:`compare` the records of a results file; ``source`` names it in reports (default: ``path``)."""
    return compare(read_results(path), tol=tol, source=str(path) if source is None else source)


# --------------------------------------------------------------------------- performance profile


def performance_profile(comparison: Comparison) -> dict[str, list[float]]:
    """Each method's sorted performance ratios ``r(p, s)`` over the instances with a best value.

    ``inf`` marks an instance the method did not solve to the best known value.
    ``rho_s(tau)`` is the fraction of the list that is ``<= tau``.
    """
    ratios: dict[str, list[float]] = {label: [] for label in comparison.methods}
    for row in comparison.problems:
        if row.best_value is None:
            continue
        reached = {label: e.seconds for label, e in row.entries.items() if e.gap == 0.0}
        fastest = min(reached.values())
        for label in ratios:
            ratios[label].append(reached[label] / fastest if label in reached else math.inf)
    return {label: sorted(values) for label, values in ratios.items()}


def plot_profile(comparison: Comparison, path: str | Path, *, title: str | None = None) -> None:
    """Draw the Dolan-More time profile (log2 tau) to a PNG/SVG/PDF file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    profile = performance_profile(comparison)
    finite = [r for values in profile.values() for r in values if math.isfinite(r)]
    if not finite:
        raise ProblemError("no instance has a best known value: nothing to profile", source=comparison.source)
    tau_max = max(2.0, max(finite) * 1.5)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, values in profile.items():
        n = len(values)
        xs, ys = [1.0], [0.0]
        for k, r in enumerate(values):
            if not math.isfinite(r):
                break
            xs.append(r)
            ys.append(ys[-1])
            xs.append(r)
            ys.append((k + 1) / n)
        xs.append(tau_max)
        ys.append(ys[-1])
        ax.plot(xs, ys, label=label, linewidth=1.8)
    ax.set_xscale("log", base=2)
    ax.set_xlim(1.0, tau_max)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(r"$\tau$ (time / fastest time reaching the best known value)")
    ax.set_ylabel(r"fraction of instances, $\rho_s(\tau)$")
    n_inst = len(next(iter(profile.values()))) if profile else 0
    ax.set_title(title or f"Performance profile ({n_inst} instances)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------- text


def format_gap(gap: float | None) -> str:
    if gap is None:
        return "-"
    return "0" if gap == 0 else f"{100 * gap:.3g} %"


def format_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s"


def format_entry(entry: Entry) -> str:
    """A per-problem cell: the value and how it compares, or the status, and the time."""
    if entry.solved:
        mark = "opt" if entry.status == "optimal" else ("best" if entry.gap == 0 else f"+{format_gap(entry.gap)}")
        return f"{entry.value:.6g} {mark}, {format_seconds(entry.seconds)}"
    return f"{entry.status}, {format_seconds(entry.seconds)}"


SUMMARY_COLUMNS = (
    ("method", "method"),
    ("jobs", "jobs"),
    ("solved", "solved"),
    ("optimal", "proven optimal"),
    ("infeasible", "infeasible (agreed / disputed)"),
    ("failed", "errors / timeouts"),
    ("mean_gap", "mean gap"),
    ("max_gap", "max gap"),
    ("geomean_seconds", "geomean time"),
    ("wins", "wins"),
    ("conflicts", "conflicts"),
)


def summary_rows(comparison: Comparison) -> list[list[str]]:
    rows = []
    for label, s in comparison.methods.items():
        rows.append(
            [
                label,
                str(s.jobs),
                str(s.solved),
                str(s.optimal),
                f"{s.infeasible} ({s.infeasible_agreed} / {s.infeasible_disputed})",
                f"{s.errors} / {s.timeouts}",
                format_gap(s.mean_gap),
                format_gap(s.max_gap),
                format_seconds(s.geomean_seconds),
                str(s.wins),
                str(s.conflicts),
            ]
        )
    return rows


def problem_rows(comparison: Comparison) -> tuple[list[str], list[list[str]]]:
    labels = list(comparison.methods)
    layouts = any(row.best_layout for row in comparison.problems)  # format v3: the best plan's cp/ep shown
    header = ["problem", "objective", "best value"] + (["best layouts"] if layouts else []) + labels
    rows = []
    for row in comparison.problems:
        best = f"{row.best_value:.6g}" if row.best_value is not None else row.verdict
        cells = [format_entry(row.entries[label]) if label in row.entries else "" for label in labels]
        rows.append([row.problem, row.objective, best] + ([row.best_layout] if layouts else []) + cells)
    return header, rows


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|")

    lines = ["| " + " | ".join(map(esc, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(esc, row)) + " |" for row in rows]
    return "\n".join(lines)


def to_markdown(comparison: Comparison, *, title: str = "Solver comparison", profile_image: str | None = None) -> str:
    """The summary table, the definitions, conflicts, and the per-problem table, as Markdown."""
    n = len(comparison.problems)
    known = sum(row.best_value is not None for row in comparison.problems)
    parts = [f"# {title}", ""]
    if comparison.source:
        parts.append(f"Results: `{comparison.source}` -- {n} instances ({known} with a known plan).")
        parts.append("")
    parts.append(_md_table([h for _, h in SUMMARY_COLUMNS], summary_rows(comparison)))
    parts += [
        "",
        "*solved*: a plan was found; *gap*: (value - best known) / best known, over solved jobs, "
        f"0 within a relative {comparison.tol:g}; *geomean time*: geometric mean of solve times over all jobs "
        "(an error or timeout counts at the time limit); "
        "*wins*: instances where the method reached the best known value fastest; *conflicts*: a proven "
        "optimum or a bound contradicted by another method's plan.",
    ]
    if profile_image:
        parts += ["", f"![performance profile]({profile_image})"]
    if comparison.conflicts:
        parts += ["", "## Conflicts", ""]
        parts += [f"* `{c['problem']}` ({c['objective']}), {c['method']}: {c['conflict']}" for c in comparison.conflicts]
    header, rows = problem_rows(comparison)
    parts += ["", "## Per problem", "", _md_table(header, rows), ""]
    return "\n".join(parts)
