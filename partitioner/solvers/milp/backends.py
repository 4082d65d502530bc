"""The MILP backends behind ``milp``: HiGHS through highspy and CBC as a command, both held
to the caller's deadline, with a MIP start and quiet standard output.

HiGHS gets what is left of the deadline once PuLP has handed it the model, less a
reserve for reading the answer back, plus an interrupt callback that stops it at
its last poll before the deadline (:class:`PollingStop`: it checks its clock only
now and then, seconds apart within a MIP). CBC gets the time left when its
command line is made, in wall-clock seconds, and is killed :data:`CBC_GRACE`
seconds past the deadline (its root LP and MIP start run seconds past the limit
on a loaded machine).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Mapping

import pulp

from ...core.stdio import quiet_stdout

__all__ = [
    "Outcome", "solve_highs", "solve_cbc", "pulp_quiet", "set_starts", "READBACK_SHARE", "READBACK_SECONDS", "CBC_GRACE", "CBC_OPTIONS",
]

_TOLERANCE = 1e-9
# Reserve for reading a solution back: a share of the time it took to hand the model to the
# backend (reading back and PuLP's bookkeeping take about half of it, measured) plus a
# constant (HiGHS stops up to ~0.3 s after its limit).
READBACK_SHARE = 0.6
READBACK_SECONDS = 0.3
# Seconds past the deadline after which a still-running CBC process is killed.
CBC_GRACE = 0.5
# CBC's command-line options (solve_cbc adds "preprocess off" unless asked for its preprocessing). CBC 2.10's
# integer preprocessing returned a wrong "optimal" on small slot models (a bottleneck of 4.0 where 1.5 is
# feasible: tests/solvers/slot/test_schedules.py, tests/fixtures/regress_cbc_preprocess_*.json; the same model
# solves right with it off, and in HiGHS); on the interleaved model it is the other way round: without it CBC
# certified wrong optima on 8 of 400 random boundary problems (tests/solvers/test_boundaries.py, against
# brute), with it on none of 800.
CBC_OPTIONS = (f"integerTolerance {_TOLERANCE}", f"primalTolerance {_TOLERANCE}", "randomCbcSeed 1")


@dataclass(frozen=True)
class Outcome:
    status: str  # optimal | feasible | infeasible | none
    status_text: str
    bound: float | None
    has_solution: bool
    timed_out: bool = False  # the time limit (or the interrupt at it) stopped the backend


class _HighsWithStart(pulp.HiGHS):
    """PuLP's highspy interface, passing the variables' initial values as a MIP start."""

    def __init__(self, *args, use_start: bool = False, deadline: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.use_start = use_start
        self.deadline = deadline

    def createAndConfigureSolver(self, lp):  # noqa: N802 (PuLP's name)
        # highspy prints a banner on stdout when the first Highs object is made;
        # keep stdout clean (the CLI's --json output goes there) unless logging
        if self.msg:
            super().createAndConfigureSolver(lp)
            return
        with quiet_stdout():
            super().createAndConfigureSolver(lp)

    def callSolver(self, lp):  # noqa: N802 (PuLP's name)
        import highspy

        h = lp.solverModel
        if h.run() == highspy.HighsStatus.kError and h.getModelStatus() == highspy.HighsModelStatus.kNotset:
            # HiGHS keeps one process-wide thread scheduler: when an earlier solve in this
            # process started it with another thread count, run() refuses to start ("scheduler
            # has already been initialized"); reset it (nothing else is solving) and run again
            highspy.Highs.resetGlobalScheduler(True)
            h.run()

    def buildSolverModel(self, lp):  # noqa: N802 (PuLP's name)
        began = time.perf_counter()
        super().buildSolverModel(lp)
        if self.deadline is not None:
            # HiGHS's own clock starts now: give it what is left of the caller's limit after
            # handing the model over, less a reserve for reading the solution back
            now = time.perf_counter()
            reserve = READBACK_SHARE * (now - began) + READBACK_SECONDS
            stop = self.deadline - reserve
            lp.solverModel.setOptionValue("time_limit", max(1e-3, stop - now))
            # HiGHS checks its clock only now and then (a root LP can run seconds past the limit
            # on a loaded machine): an interrupt callback that stops at the last poll before `stop`
            interrupt = PollingStop(stop, now)
            for hook in (lp.solverModel.cbSimplexInterrupt, lp.solverModel.cbIpmInterrupt, lp.solverModel.cbMipInterrupt):
                hook += interrupt
        if self.use_start:
            import highspy

            variables = lp.variables()
            solution = highspy.HighsSolution()
            solution.col_value = [float(v.varValue) if v.varValue is not None else 0.0 for v in variables]
            solution.value_valid = True
            lp.solverModel.setSolution(solution)


class PollingStop:
    """An interrupt callback that stops a solver at its last poll before a deadline.

    Within a MIP, HiGHS 1.16 polls its interrupt callbacks only between the
    phases of its search (cut-separation rounds, nodes), which on 64-layer
    slot models are seconds apart (gaps up to 7.8 s seen at the root, with
    8 polls in 30 s). Waiting for the first poll past the deadline overruns
    by up to one gap. The callback therefore interrupts once the next poll,
    expected one gap (the last one seen) away, would fall past ``stop``.

    Parameters
    ----------
    stop : float
        The deadline, on :func:`time.perf_counter`'s clock.
    began : float
        When the solver was started (the first gap is measured from it).
    clock : callable, optional
        The clock (tests pass a fake one).
    """

    def __init__(self, stop: float, began: float, clock=time.perf_counter):
        self.stop = stop
        self.last = began
        self.clock = clock

    def expects_past_stop(self) -> bool:
        """Record a poll now; whether the next one is expected past the deadline."""
        now = self.clock()
        gap, self.last = now - self.last, now
        return now + gap > self.stop

    def __call__(self, event) -> None:
        if self.expects_past_stop():
            event.interrupt()


@contextmanager
def pulp_quiet():
    """Hide PuLP 3's deprecation notices about its 4.0 API (the pinned range is < 4)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"pulp(\.|$)")
        yield


def set_starts(starts: Mapping[Any, float] | None) -> None:
    """Give each variable its start value, put back inside its bounds.

    A start computed from a plan in floating point may fall a rounding error
    outside a bound (-6e-08 under a lower bound of 0), which PuLP refuses with a
    ``ValueError``; the start is a hint, so it is clamped to the bounds.
    """
    for var, value in (starts or {}).items():
        low, high = var.lowBound, var.upBound
        if low is not None and value < low:
            value = low
        if high is not None and value > high:
            value = high
        var.setInitialValue(value)


def solve_highs(
    lp: pulp.LpProblem, deadline: float | None, threads: int, log: bool, use_start: bool, presolve: bool = False
) -> Outcome:
    """HiGHS on ``lp``; a start HiGHS fails on ("Solve error", seen with highspy 1.16 on a valid ZB-H1
    start, tests/test_slot_schedules.py) is dropped and the model solved again without it."""
    outcome = _solve_highs_once(lp, deadline, threads, log, use_start, presolve)
    if use_start and outcome.status == "none" and outcome.status_text == "Solve error":
        if deadline is None or time.perf_counter() < deadline:
            outcome = _solve_highs_once(lp, deadline, threads, log, False, presolve)
    return outcome


def _solve_highs_once(
    lp: pulp.LpProblem, deadline: float | None, threads: int, log: bool, use_start: bool, presolve: bool
) -> Outcome:
    import highspy

    solver = _HighsWithStart(
        msg=log,
        gapRel=0.0,
        gapAbs=0.0,
        threads=threads,
        use_start=use_start,
        deadline=deadline,
        mip_feasibility_tolerance=_TOLERANCE,
        primal_feasibility_tolerance=_TOLERANCE,
        random_seed=0,
        presolve="on" if presolve else "off",
    )
    try:
        lp.solve(solver)
    except (IndexError, pulp.PulpSolverError) as err:  # PuLP reading back a model HiGHS rejected
        return Outcome("none", f"highs failed: {type(err).__name__}: {err}", None, False)
    h = lp.solverModel
    status = h.getModelStatus()
    info = h.getInfo()
    has_solution = info.primal_solution_status == 2  # kSolutionStatusFeasible
    text = h.modelStatusToString(status)
    stopped = status in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kInterrupt)
    bound = info.mip_dual_bound if has_solution or stopped else None
    if status == highspy.HighsModelStatus.kOptimal:
        return Outcome("optimal", text, bound, has_solution)
    if status in (highspy.HighsModelStatus.kInfeasible,):
        return Outcome("infeasible", text, None, False)
    return Outcome("feasible" if has_solution else "none", text, bound, has_solution, timed_out=stopped)


class _CbcTimeout(Exception):
    """CBC was still running past the deadline and was stopped."""


class _CbcInfeasible(Exception):
    """CBC proved the model infeasible (and crashed writing its solution file)."""


# CBC's line when its bound tightening proves a model infeasible
_CBC_PROVED_INFEASIBLE = re.compile(r"^Problem is infeasible - tightenPrimalBounds!\s*$", re.MULTILINE)


class _CbcByDeadline(pulp.PULP_CBC_CMD):
    """PuLP's CBC command, held to a deadline.

    Its ``-sec`` limit is what is left of the deadline once the model file is
    written, less a reserve for reading the solution back; and since CBC
    checks its clock only between phases (its root LP and the MIP start alone
    can take seconds on a loaded machine), the process is killed
    :data:`CBC_GRACE` seconds past the deadline. Otherwise it runs as PuLP's
    ``solve_CBC`` does (MPS model, MIP start, solution file).
    """

    def __init__(self, *args, deadline: float | None = None, log_path: str, **kwargs):
        self.deadline = deadline
        self.log_path = log_path
        self.began = time.perf_counter()
        super().__init__(*args, **kwargs)

    def remaining(self) -> float:
        assert self.deadline is not None, "asked for only under a deadline"
        now = time.perf_counter()
        reserve = READBACK_SHARE * (now - self.began) + READBACK_SECONDS
        return max(0.01, round(self.deadline - now - reserve, 2))

    def _proves_infeasible(self, mps: str) -> bool:
        """After a crash: whether CBC, run again without a solution file, proves the model infeasible.

        CBC 2.10.3 dies of SIGSEGV writing its solution file when bound tightening has
        proved a model infeasible (a 2-layer zb-h1 model, tests/test_slot_schedules.py);
        the log it had buffered is lost with it. Without ``-solution`` it does not crash
        and says so in a line of its own.
        """
        args = [self.path, mps, *[a for option in self.options for a in ("-" + option).split()], "-solve"]
        wait = None if self.deadline is None else max(0.0, self.deadline - time.perf_counter()) + CBC_GRACE
        try:
            done = subprocess.run(args, capture_output=True, text=True, errors="replace", timeout=wait, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return False
        return done.returncode == 0 and _CBC_PROVED_INFEASIBLE.search(done.stdout) is not None

    def solve_CBC(self, lp, use_mps=True):  # noqa: N802 (PuLP's name)
        mps, sol, mst = self.create_tmp_files(lp.name, "mps", "sol", "mst")
        try:
            variables, var_names, con_names, _ = lp.writeMPS(mps, rename=1)
            args = [self.path, mps]
            if self.optionsDict.get("warmStart", False):
                self.writesol(mst, lp, variables, var_names, con_names)
                args += ["-mips", mst]
            if self.deadline is not None:
                args += ["-sec", str(self.remaining())]
            for option in self.options + self.getOptions():
                args += ("-" + option).split()
            args += ["-solve", "-printingOptions", "all", "-solution", sol]
            wait = None if self.deadline is None else max(0.0, self.deadline - time.perf_counter()) + CBC_GRACE
            with open(self.log_path, "w", encoding="utf-8") as pipe:
                process = subprocess.Popen(args, stdout=pipe, stderr=pipe, stdin=subprocess.DEVNULL)
                try:
                    code = process.wait(timeout=wait)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
                    raise _CbcTimeout from None
            if code < 0 and self._proves_infeasible(mps):
                raise _CbcInfeasible
            if code != 0 or not os.path.exists(sol):
                raise pulp.PulpSolverError(f"cbc exited with code {code}")
            status, values, reduced, prices, slacks, sol_status = self.readsol_MPS(sol, lp, variables, var_names, con_names)
            lp.assignVarsVals(values)
            lp.assignVarsDj(reduced)
            lp.assignConsPi(prices)
            lp.assignConsSlack(slacks, activity=True)
            lp.assignStatus(status, sol_status)
            return status
        finally:
            self.delete_tmp_files(mps, sol, mst)


def solve_cbc(lp: pulp.LpProblem, deadline: float | None, threads: int, log: bool, use_start: bool,
              preprocess: bool = False) -> Outcome:
    """CBC on ``lp`` within ``deadline``; ``preprocess``: run CBC's integer preprocessing (see :data:`CBC_OPTIONS`)."""
    fd, path = tempfile.mkstemp(prefix="partitioner-cbc-", suffix=".log")
    os.close(fd)
    failure, timed_out = None, False
    limit = None if deadline is None else max(0.0, deadline - time.perf_counter())
    try:
        solver = _CbcByDeadline(
            msg=False,
            gapRel=0.0,
            gapAbs=0.0,
            deadline=deadline,
            log_path=path,
            threads=threads,
            warmStart=use_start,
            timeMode="elapsed",  # wall, not CPU, seconds: on a loaded machine CPU time lags the clock
            options=[*CBC_OPTIONS, *([] if preprocess else ["preprocess off"])],
        )
        try:
            code = lp.solve(solver)
        except pulp.PulpSolverError as err:
            failure = str(err)
        except _CbcTimeout:
            failure, timed_out = "stopped at the time limit", True
        except _CbcInfeasible:
            return Outcome("infeasible", "infeasible (proved by bound tightening)", None, False)
        with open(path, encoding="utf-8", errors="replace") as f:
            text_log = f.read()
    finally:
        os.unlink(path)
    if log:
        print(text_log, file=sys.stderr)
    if failure is not None:  # e.g. the time limit ended CBC while it read the start
        tail = " | ".join(line.strip() for line in text_log.strip().splitlines()[-3:])
        return Outcome("none", f"cbc failed: {tail or failure}", None, False, timed_out=timed_out)
    result = re.search(r"^Result - (.*)$", text_log, re.MULTILINE)
    text = result.group(1).strip() if result else pulp.LpStatus[code]
    bound = _cbc_number(text_log, "Lower bound")
    if lp.sol_status == pulp.LpSolutionOptimal:
        return Outcome("optimal", text, _cbc_number(text_log, "Objective value"), True)
    if code == pulp.LpStatusInfeasible or lp.sol_status == pulp.LpSolutionInfeasible:
        # CBC says "LP relaxation infeasible or too expensive" when the time
        # limit ends its root processing: only a run that ended early proves it
        wall = _cbc_number(text_log, r"Time \(Wallclock seconds\)")
        if limit is None or (wall is not None and wall < 0.9 * limit):
            return Outcome("infeasible", text, None, False)
        return Outcome("none", f"{text} (at the time limit)", None, False, timed_out=True)
    has_solution = lp.sol_status == pulp.LpSolutionIntegerFeasible
    return Outcome("feasible" if has_solution else "none", text, bound, has_solution)


def _cbc_number(text: str, label: str) -> float | None:
    found = re.search(rf"^{label}:\s*([-+0-9.eE]+)", text, re.MULTILINE)
    return float(found.group(1)) if found else None
