"""The README is the front door: its commands run and print what it shows.

* its first two code blocks are the set-up commands: install and plan, install and test
  (exactly what ``.ci/run`` runs);
* the quick start's commands run, and their output is the output the README pastes
  (measured solve times aside; ``...`` marks lines left out);
* the Python example prints what its comments say;
* the picture is the project's own Gantt chart of the plan its caption names;
* the command table names every CLI command, the concepts are each defined, every
  relative link of README.md, docs/ and examples/README.md resolves;
* README.md stays short (<= 150 lines), and no user-facing page speaks of issue
  numbers or lessons.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shlex
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_cli

README = ROOT / "README.md"
USER_PAGES = [README, ROOT / "examples" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAX_LINES = 150
CONCEPTS = ("stage", "mesh", "layout", "segment", "variant", "schedule", "recipe", "baseline")


def blocks(path: Path = README) -> list[tuple[str, str]]:
    """The fenced code blocks of ``path`` in order, as (language, body)."""
    return [(lang, body) for lang, body in re.findall(r"^```(\w*)\n(.*?)^```", path.read_text(), re.S | re.M)]


def commands() -> list[str]:
    return [body.strip() for lang, body in blocks() if lang == "bash"]


def normalised(text: str) -> list[str]:
    """Lines without trailing blanks, the measured solve time ``[0.70 s]`` masked."""
    return [re.sub(r"\[\d+\.\d+ s\]", "[t s]", line).rstrip() for line in text.strip("\n").splitlines()]


def assert_shows(pasted: str, printed: str) -> None:
    """``pasted`` is ``printed``, where a ``...`` line stands for any lines (none at the start)."""
    got = normalised(printed)
    chunks: list[list[str]] = [[]]
    for line in normalised(pasted):
        if line == "...":
            chunks.append([])
        else:
            chunks[-1].append(line)
    pos = 0
    for i, chunk in enumerate(chunks):
        if not chunk:
            continue
        starts = [pos] if i == 0 else range(pos, len(got) - len(chunk) + 1)
        found = next((s for s in starts if got[s : s + len(chunk)] == chunk), None)
        assert found is not None, "README shows:\n" + "\n".join(chunk) + "\n\nthe command prints:\n" + "\n".join(got)
        pos = found + len(chunk)
    if chunks[-1]:
        assert pos == len(got), "the command prints more than the README shows:\n" + "\n".join(got[pos:])


def partitioner_args(line: str) -> tuple[list[str], str | None]:
    """The arguments of one ``partitioner ...`` command line and the file its stdout is sent to."""
    words = shlex.split(line, comments=True)
    assert words and words[0] in ("partitioner", ".venv/bin/partitioner"), f"not a partitioner command: {line!r}"
    target = None
    if ">" in words:
        at = words.index(">")
        words, target = words[:at], words[at + 1]
    return words[1:], target


def run_block(body: str, cwd: Path) -> str:
    """Run every command of a bash block in ``cwd``; the stdout of the last one."""
    stdout = ""
    for line in filter(None, (raw.strip() for raw in body.splitlines())):
        args, target = partitioner_args(line)
        proc = run_cli(*args, cwd=cwd)
        assert proc.returncode == 0, f"{line}\n{proc.stderr}"
        stdout = proc.stdout
        if target:
            (cwd / target).write_text(stdout)
    return stdout


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    return tmp_path


# --------------------------------------------------------------------------- the two set-up commands


def test_readme_starts_with_the_two_commands():
    (lang1, first), (lang2, second) = blocks()[:2]
    assert lang1 == lang2 == "bash"
    assert "pip install" in first and ".venv/bin/partitioner plan --model " in first
    assert "pip install" in second and "pytest" in second


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert commands()[1] == ci[-1]


@pytest.mark.slow
def test_the_first_command_installs_the_package_and_prints_the_quick_start_plan(workdir):
    steps = [step.strip() for step in commands()[0].split("&&")]
    assert steps[:2] == ["python3 -m venv .venv", ".venv/bin/pip install -q ."], steps
    assert steps[2] == ".venv/bin/partitioner warmup", "the install compiles dp's kernels (no solve waits for it)"
    (lang, pasted) = blocks()[2]
    assert lang == "text", "the quick start opens with the first command's output"
    assert_shows(pasted, run_block("\n".join(steps[2:]), workdir))


# --------------------------------------------------------------------------- the quick start


@pytest.mark.slow
def test_every_other_readme_command_runs_and_prints_what_the_readme_shows(workdir):
    found = blocks()
    shown = 0
    for i, (lang, body) in enumerate(found[3:], start=3):
        if lang != "bash":
            continue
        printed = run_block(body, workdir)
        if i + 1 < len(found) and found[i + 1][0] == "text":
            assert_shows(found[i + 1][1], printed)
            shown += 1
    assert shown >= 1, "the quick start pastes the output of its export"
    assert "export" in commands()[2] and (workdir / "plan.json").is_file()


def test_the_python_example_prints_what_its_comments_say(monkeypatch):
    (body,) = [body for lang, body in blocks() if lang == "python"]
    expected = [m.group(1).strip() for m in re.finditer(r"^print\(.*#\s*(.+)$", body, re.M)]
    assert expected, "the example says what it prints"
    monkeypatch.chdir(ROOT)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(body, "README.md", "exec"), {})
    assert out.getvalue().strip().splitlines() == expected


@pytest.mark.slow
def test_the_picture_is_the_gantt_chart_of_the_plan_its_caption_names(workdir):
    text = README.read_text()
    image = re.search(r"!\[[^\]]*\]\((docs/img/[\w.-]+\.png)\)", text)
    assert image, "README shows a picture from docs/img/"
    assert (ROOT / image.group(1)).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    command = re.search(r"`(partitioner plan [^`]*--gantt (\S+))`", text)
    assert command and command.group(2) == image.group(1), "the caption gives the command that drew it"
    args, _ = partitioner_args(command.group(1))
    at = args.index("--gantt")
    args[at + 1] = str(workdir / "plan.png")
    proc = run_cli(*args, "--json", cwd=workdir)
    assert proc.returncode == 0, proc.stderr
    assert (workdir / "plan.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    doc = json.loads(proc.stdout)
    devices = [stage["devices"] for stage in doc["plan"]["stages"]]
    layouts = {(stage["configs"][-1]["dp"], stage["configs"][-1]["tp"]) for stage in doc["plan"]["stages"]}
    caption = " ".join(text[image.end() : command.end()].split())
    assert "two stages on 16 and 16 GPUs" in caption and devices == [16, 16]
    assert "dp 16 × tp 1" in caption and layouts == {(16, 1)}
    assert f"{doc['microbatches']} microbatches" in caption
    assert f"{doc['speedup']:.3f}x faster" in caption


# --------------------------------------------------------------------------- what the README claims


def test_the_command_table_names_every_cli_command():
    from partitioner.cli import app

    section = README.read_text().split("## Commands", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| `"))
    named = set(re.findall(r"`partitioner (\w+)", table)) | set(re.findall(r"/ `(\w+)`", table))
    assert named == {command.name for command in app.registered_commands}


def test_every_concept_has_its_one_line():
    section = README.read_text().split("## Concepts", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("* **")]
    assert [re.match(r"\* \*\*(\w+)\*\*: \S", line).group(1) for line in lines] == list(CONCEPTS)


def test_the_limits_the_error_messages_point_to_are_linked_from_the_readme():
    # the loaders' messages say "see the accepted ranges in docs/limits.md"
    assert re.search(r"\[docs/limits\.md\]\(docs/limits\.md\): the accepted ranges", README.read_text())


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
        if re.match(r"\w+://", target):
            continue
        assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to missing {target}"


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_page_names_exists(page):
    named = re.findall(r"`((?:partitioner|tests|benchmarks|examples|docs)/[\w/.-]*)`", page.read_text())
    missing = sorted({name for name in named if not (ROOT / name).exists()})
    assert not missing, f"{page.relative_to(ROOT)} names missing files {missing}"


def test_the_readme_is_short():
    assert len(README.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("page", USER_PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_user_pages_speak_of_no_issue_numbers_or_lessons(page):
    text = page.read_text()
    assert not re.search(r"(?i)\bissues?[-_ ]*#?\d", text), f"{page.name} names an issue number"
    assert not re.search(r"(?i)lesson", text), f"{page.name} speaks of lessons"
    assert not re.search(r"(?<![\w/])#\d+\b", text), f"{page.name} refers to #N"


def test_docs_hold_the_reference_pages():
    docs = {path.name for path in (ROOT / "docs").glob("*.md")}
    assert {"schedules.md", "export.md", "limits.md", "methods.md", "benchmarks.md"} <= docs
    assert "benchmarks/results/REPORT.md" in (ROOT / "docs" / "benchmarks.md").read_text()
    assert os.path.exists(ROOT / "benchmarks" / "results" / "REPORT.md")
