"""One time limit shared by everything a command does: :class:`Deadline`.

:func:`~partitioner.solvers.solve` takes a :class:`Deadline` (or seconds, from
which it starts one) and every method checks it; ``plan --time-limit S`` bounds
the whole command: :func:`~partitioner.planning.plan_model.run_plan` starts one
:class:`Deadline` before it loads anything and hands it to every step, each
solve included. A step that finds the time spent skips its remaining work and
says so (:meth:`Deadline.cut`), and ``plan`` returns the best plan found so
far, ``feasible``, its message naming what was cut short (:meth:`Deadline.message`).
It sits in ``core`` so that the solvers (below ``planning``) can take it.
"""
from __future__ import annotations

import math
import os
import time
from typing import Callable

__all__ = ["Deadline", "GRACE_SECONDS", "FIRST_PLAN_GRACE_SECONDS", "TimeLimitReached", "load_slowdown",
           "process_seconds"]

# The one solve a run may still start after its deadline when it has found nothing at all yet (no baseline fits and
# no plan was solved): without it a limit shorter than the problem building would always answer "no plan". One such
# solve per run, so the command stays within the limit plus this grace (the issue asks for S + 5 s at most).
GRACE_SECONDS = 1.0
# How long past the command's limit ``plan`` may still build and screen microbatch counts while it knows no plan
# at all (no count screened, or none with a baseline or greedy plan): the first problem of a 1,024-GPU job is about
# a CPU second to build, several wall seconds at a load of 8 on 2 cores, and a limit that passes during it would
# otherwise answer "no plan" where one exists. With GRACE_SECONDS and the answer's rendering the command stays
# within the S + 5 s of issue 35; the builds stop at it between layouts.
FIRST_PLAN_GRACE_SECONDS = 3.0


class TimeLimitReached(Exception):
    """A step with no partial answer (building a problem) stopped because its :class:`Deadline` passed.

    Raised between units of work (a layer's table, a layout), never inside
    one, so nothing is left half-built; the caller records the cut
    (:meth:`Deadline.cut`) and answers with what it has. ``what`` names the
    step and where it stopped.
    """

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class Deadline:
    """The end of a ``plan`` run's time, and the parts of the run it cut short.

    Parameters
    ----------
    seconds : float or None
        The whole run's limit; None: no limit (every method call gets the
        caps its caller gives, nothing is ever cut).
    clock : callable
        Seconds since some fixed point (default :func:`time.perf_counter`).
    spent : float
        Seconds of the limit already used before this deadline was made: the
        command line passes :func:`process_seconds`, so that ``--time-limit``
        bounds the whole process, its start-up and imports included.
    whole : float or None
        The command's limit when ``seconds`` is a share of it (``plan --target any``: the search over
        every plan gets a share, each framework's run the rest); the message names both.
    backstop : float or None
        Without ``seconds``: the default bound of a command the user set no limit on (``plan``'s
        ``DEFAULT_PLAN_SECONDS``). Every check, :meth:`left` and :meth:`solve_limit` stop at it as at a
        limit, but :attr:`limited` stays False: the steps whose budget differs when the user set a limit
        (the exact solve's default budget, the per-target shares) keep their defaults.
    """

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.perf_counter, *,
                 spent: float = 0.0, whole: float | None = None, backstop: float | None = None) -> None:
        self.seconds = seconds
        self.whole = whole
        self.backstop = backstop if seconds is None else None
        self._clock = clock
        self._start = clock() - max(0.0, spent)
        end = seconds if seconds is not None else self.backstop
        self._end = None if end is None else self._start + end
        self._cuts: dict[str, list[str]] = {}
        self._grace = end is not None

    @classmethod
    def of(cls, limit: "Deadline | float | None") -> "Deadline":
        """``limit`` itself when it is a :class:`Deadline`, else a new one of ``limit`` seconds (None: no limit)."""
        return limit if isinstance(limit, Deadline) else cls(limit)

    @property
    def limited(self) -> bool:
        """Whether the user set the run a limit (a :attr:`backstop` alone is not one)."""
        return self.seconds is not None

    @property
    def bounded(self) -> bool:
        """Whether the run ends at some time: a limit, or a :attr:`backstop`."""
        return self._end is not None

    def with_backstop(self, seconds: float) -> "Deadline":
        """This deadline when it is bounded, else one on the same clock and start, bounded at ``seconds``."""
        if self.bounded:
            return self
        return Deadline(None, self._clock, spent=self.elapsed(), backstop=seconds)

    def elapsed(self) -> float:
        """Seconds since the run started (since this deadline was made)."""
        return self._clock() - self._start

    def left(self) -> float:
        """Seconds left (infinite without a limit, 0 once the deadline passed)."""
        return math.inf if self._end is None else max(0.0, self._end - self._clock())

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return self.left() <= 0.0

    def extended(self, seconds: float) -> "Deadline":
        """A deadline ``seconds`` after this one, on the same clock, with cuts of its own (no limit stays none)."""
        if self.seconds is None:
            return Deadline(None, self._clock, spent=self.elapsed(),
                            backstop=None if self.backstop is None else self.backstop + seconds)
        return Deadline(self.seconds + seconds, self._clock, spent=self.elapsed(), whole=self.whole)

    def share(self, seconds: float, *, spent: float = 0.0, whole: float | None = None) -> "Deadline":
        """A deadline of ``seconds`` on this one's clock, ``spent`` of them already used, with cuts of its own:
        a part of the run's time (``plan --target any``'s search over every plan, each framework's run)."""
        return Deadline(seconds, self._clock, spent=spent, whole=whole)

    def check(self, what: str) -> None:
        """Raise :class:`TimeLimitReached` naming ``what`` when the deadline has passed (a no-op without a limit)."""
        if self._end is not None and self._clock() >= self._end:
            raise TimeLimitReached(what)

    def at(self) -> float | None:
        """The deadline on :func:`time.perf_counter`'s clock (what the solvers' loops compare with), None without one.

        Computed from :meth:`left`, so a deadline on another clock (a test's) maps onto the same moment.
        """
        return None if self._end is None else time.perf_counter() + self.left()

    def solve_limit(self, cap: float | None = None) -> float | None:
        """The time limit of the next solve: what is left, at most ``cap``; None for no limit; 0 when none is left."""
        left = min(self.left(), math.inf if cap is None else cap)
        return None if math.isinf(left) else left

    @property
    def has_grace(self) -> bool:
        """Whether :meth:`grace` would still give time."""
        return self._grace

    def grace(self) -> float:
        """:data:`GRACE_SECONDS` the first time (a run that found nothing yet may still try once), else 0."""
        if not self._grace:
            return 0.0
        self._grace = False
        return GRACE_SECONDS

    def cut(self, part: str, what: str = "") -> None:
        """Record that ``what`` of ``part`` of the run was cut short (each once, in the order they happen)."""
        items = self._cuts.setdefault(part, [])
        if what and what not in items:
            items.append(what)

    @property
    def cuts(self) -> tuple[str, ...]:
        """What the deadline cut short, one line per part (``part: what, what``), in the order it happened."""
        return tuple(f"{part}: {', '.join(items)}" if items else part for part, items in self._cuts.items())

    def message(self) -> str:
        """``time limit of S s reached: cut short: ...``, or "" when nothing was cut.

        With ``whole``: ``time limit of S s reached; cut short: ... (this run had s s of it)``, S the command's;
        with a :attr:`backstop`: ``default time limit of B s reached (no --time-limit was set); cut short: ...``.
        """
        if not self._cuts:
            return ""
        if self.seconds is None:
            head = "" if self.backstop is None else \
                f"default time limit of {self.backstop:g} s reached (no --time-limit was set); "
            return head + "cut short: " + "; ".join(self.cuts)
        if self.whole is None:
            return f"time limit of {self.seconds:g} s reached; cut short: " + "; ".join(self.cuts)
        return (f"time limit of {self.whole:g} s reached; cut short: " + "; ".join(self.cuts)
                + f" (the search over every plan had {self.seconds:.3g} s of it, the frameworks' runs the rest)")


def load_slowdown() -> float:
    """How much longer than on an idle core a CPU-bound step takes now: the 1-minute load average per core,
    at least 1 (1 where the platform has no load average).

    A step that cannot be interrupted (loading compiled kernels, a fallback plan that must be built) is
    started under a deadline only when its CPU seconds times this factor fit in the time left.
    """
    try:
        load = os.getloadavg()[0]
    except OSError:
        return 1.0
    return max(1.0, load / (os.cpu_count() or 1))


def process_seconds() -> float:
    """Wall seconds since this process started (0 where the platform does not say).

    Read from ``/proc/self/stat`` (field 22, the start time in clock ticks
    after boot) against ``/proc/uptime`` [1]_: the interpreter's start-up and
    every import before a command's deadline is made count against its limit.

    References
    ----------
    .. [1] proc_pid_stat(5), Linux man-pages: https://man7.org/linux/man-pages/man5/proc_pid_stat.5.html
    """
    try:
        with open("/proc/self/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of the whole line
    except (OSError, ValueError, IndexError):
        return 0.0
    return max(0.0, uptime - started)
