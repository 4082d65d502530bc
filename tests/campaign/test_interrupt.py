"""The campaign's interrupt door: Ctrl-C (SIGINT) during ``plan``, whatever the phase, is one line and exit 130.

Issue 35: a SIGINT while ``plan`` loaded its modules printed a traceback (the
package root imported everything before any command code ran). The
deterministic cases raise the interrupt exactly while a chosen module loads
(an import hook), or while Typer parses, or inside the command; the slow
one sends real signals to a running ``plan`` at several moments after the
interpreter has started and imported the package root (an interrupt inside
the interpreter's own start-up, or while it runs the root's few statements
before any entry point's guard, is Python's and not checked).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAN = ["plan", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--global-batch", "64",
        "--time-limit", "30"]

# Raise KeyboardInterrupt when the module named argv[1] is imported (or, with "parse:", when click parses),
# then run the CLI as `python -m partitioner` does.
_HOOKED = textwrap.dedent(
    """
    import runpy, sys
    target = sys.argv[1]

    class Interrupt:
        def find_spec(self, name, path=None, target_module=None):
            if name == target:
                raise KeyboardInterrupt
            return None

    if target.startswith("parse:"):
        import typer.core
        def make_context(self, *args, **kwargs):
            raise KeyboardInterrupt
        typer.core.TyperGroup.make_context = make_context
    else:
        sys.meta_path.insert(0, Interrupt())
    sys.argv = ["partitioner", *sys.argv[2:]]
    runpy.run_module("partitioner", run_name="__main__", alter_sys=True)
    """
)


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"}


# a progress line of a piped command (partitioner.cli.common.working): "planning ...: <phase> (12 s)"
PROGRESS = re.compile(r"^\S.* \(\d+ s\)$")


def _assert_interrupted(proc: subprocess.CompletedProcess) -> None:
    """Exit 130, no traceback, and ``interrupted`` the one line on stderr besides the progress lines before it."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-3000:])
    assert lines[-1:] == ["interrupted"], proc.stderr[-3000:]
    assert all(PROGRESS.match(line) for line in lines[:-1]), proc.stderr[-3000:]


@pytest.mark.parametrize("module", [
    "partitioner.cli.common",  # the commands' shared module (Typer, rich, the problem and solver packages)
    "typer",
    "partitioner.solvers",
    "partitioner.solvers.dp.compiled.aot",  # the dp kernels (ahead-of-time; numba is no longer loaded), in the first solve
    "partitioner.presets",  # imported inside `plan` itself
    "partitioner.planning",
    "parse:",  # Typer parsing the arguments
])
def test_an_interrupt_while_plan_loads_is_one_line_and_exit_130(module):
    proc = subprocess.run([sys.executable, "-c", _HOOKED, module, *PLAN], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env=_env())
    _assert_interrupted(proc)


def test_the_package_root_loads_nothing_until_a_name_is_used():
    code = ("import sys, partitioner, partitioner.cli; "
            "print(sorted(m for m in sys.modules if m.startswith('partitioner')), 'typer' in sys.modules); "
            "import partitioner.simulate.engine; from partitioner import solve, simulate; "
            "print(callable(solve) and partitioner.simulate is simulate is partitioner.simulate.__globals__['simulate'])")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT, env=_env())
    assert proc.returncode == 0, proc.stderr
    loaded, typer_loaded = proc.stdout.splitlines()[0].rsplit(" ", 1)
    assert loaded == "['partitioner', 'partitioner.cli', 'partitioner.cli.exits']" and typer_loaded == "False", proc.stdout
    assert proc.stdout.splitlines()[1] == "True"


# The CLI as `python -m partitioner` runs it, once the interpreter is up and runpy has imported the package
# root (a few statements that no code of the package can guard: its entry points' guards run after it): a side
# file says so.
_READY = textwrap.dedent(
    """
    import os, runpy, sys
    import partitioner
    open(sys.argv[1] + ".tmp", "w").close()
    os.replace(sys.argv[1] + ".tmp", sys.argv[1])  # seen at once, whole: no signal lands in writing it
    sys.argv = ["partitioner", *sys.argv[2:]]
    runpy.run_module("partitioner", run_name="__main__", alter_sys=True)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3, 1.0, 2.5, 6.0])
def test_sigint_at_any_moment_of_plan_is_one_line_and_exit_130(tmp_path, delay):
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", _READY, str(ready), *PLAN], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
    began = time.monotonic()
    while not ready.exists() and proc.poll() is None and time.monotonic() - began < 120:
        time.sleep(0.005)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    if proc.returncode == 0:  # it finished before the signal: nothing to check but its cleanliness
        assert "Traceback" not in err
        return
    _assert_interrupted(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))


@pytest.mark.slow
def test_sigints_while_plan_imports_its_commands_all_exit_130():
    """Real signals 0.6-1.35 s after start, while ``plan`` loads its commands: every one exits 130. The campaign
    (seed 404), then this loop, saw 2-3 of 16 such interrupts end the process by SIGINT itself (exit -2) after ``interrupted``:
    CPython 3.11 can end a process whose code caught an interrupt by the signal at a normal exit, so the CLI
    leaves with ``os._exit`` (:func:`partitioner.cli.exits.exit_interrupted`). The window is timing-dependent:
    without the fix the loop fails on some runs, not all."""
    codes = []
    for i in range(16):
        proc = subprocess.Popen([sys.executable, "-m", "partitioner", *PLAN], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
        time.sleep(0.6 + 0.05 * i)
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
        assert "Traceback" not in err, err[-3000:]
        codes.append(proc.returncode)
    assert all(code in (0, 130) for code in codes), codes


def test_an_interrupt_python_would_only_print_ends_the_command():
    """A KeyboardInterrupt raised in a weakref callback (as one landing in the import machinery's module-lock
    callback) is "unraisable": Python prints it and carries on, so a Ctrl-C was lost and a traceback printed
    beside a finished plan. The entry points' hook makes it an interrupt: one line, exit 130."""
    code = textwrap.dedent("""
        import weakref
        from partitioner.cli.exits import interrupts_are_never_ignored
        interrupts_are_never_ignored()
        class Box: pass
        box = Box()
        def callback(ref): raise KeyboardInterrupt
        ref = weakref.ref(box, callback)
        del box
        print("carried on")
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=_env())
    assert "carried on" not in proc.stdout
    _assert_interrupted(proc)


def test_an_interrupt_python_wrapped_in_another_error_is_an_interrupt():
    """Python wraps an exception raised in ``__set_name__`` (a class being built as a module loads) in a
    ``RuntimeError``; a Ctrl-C landing there was reported as an internal error, exit 3."""
    code = textwrap.dedent("""
        import runpy, sys, typer.core
        def make_context(self, *args, **kwargs):
            class Field:
                def __set_name__(self, owner, name):
                    raise KeyboardInterrupt
            class Builders:
                built = Field()
        typer.core.TyperGroup.make_context = make_context
        sys.argv = ["partitioner", "clusters"]
        runpy.run_module("partitioner", run_name="__main__", alter_sys=True)
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=_env())
    _assert_interrupted(proc)


def test_a_ctrl_c_after_the_outcome_is_decided_does_not_end_the_shutdown():
    """A SIGINT while the interpreter shuts down (here: from an exit handler, after the command printed its
    answer) ended the process by the signal itself: no word, and a return code of -2 instead of the command's."""
    code = textwrap.dedent("""
        import atexit, os, runpy, signal, sys, time
        def late_ctrl_c():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)
        atexit.register(late_ctrl_c)
        sys.argv = ["partitioner", "clusters"]
        runpy.run_module("partitioner", run_name="__main__", alter_sys=True)
        """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env=_env())
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr and "interrupted" not in proc.stderr, proc.stderr[-3000:]
