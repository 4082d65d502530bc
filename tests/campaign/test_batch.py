"""The campaign at the ``batch`` door: outputs that are not files, write failures, two sweeps on one output.

Issue 35: ``batch --out /dev/full`` grew to 9.7 GB (the store read the device
to its end, which never comes, before its first write). A results file is
appended, cut and resumed: it must be a regular file, and a write failure
stops the sweep with one line naming it. Two sweeps writing one output:
the second is refused at once (the file lock) and no line is lost or written
twice, whichever of them finishes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from partitioner.batch import ResultsFile, SweepError, read_results
from tests.campaign.doors import assert_refused, run_cli, strict_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _sweep(tmp_path: Path, methods=("greedy", "uniform")) -> Path:
    problems = [str(EXAMPLES / n) for n in ("vla_toy_2x4.json", "rebalance_4gpu.json", "colocated_1node.json")]
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"problems": problems, "methods": list(methods)}))
    return path


@pytest.mark.parametrize("device", ["/dev/full", "/dev/zero", "/dev/null"])
def test_a_device_is_not_a_results_file(device):
    if not os.path.exists(device):
        pytest.skip(f"no {device} here")
    with pytest.raises(SweepError, match="regular file") as info:
        ResultsFile(device)
    assert info.value.source == device
    with pytest.raises(SweepError, match="regular file"):
        read_results(device)


def test_a_fifo_is_not_read_forever(tmp_path):
    fifo = tmp_path / "results.jsonl"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: open(fifo, "wb").close(), daemon=True)  # lets the open go through
    writer.start()
    with pytest.raises(SweepError, match="regular file"):
        read_results(fifo)
    writer.join(5)


@pytest.mark.slow
def test_batch_out_dev_full_is_one_line_and_no_growth(tmp_path):
    code, out, err, seconds, rss = run_cli(tmp_path, "batch", str(_sweep(tmp_path)), "--out", "/dev/full", "--workers", "1",
                                           "--no-progress", timeout=120)
    assert_refused(code, err, "/dev/full", "regular file", codes=(2,))
    assert rss < 1024, f"peak {rss} MiB"


@pytest.mark.slow
def test_compare_of_a_device_is_one_line(tmp_path):
    code, _, err, _, rss = run_cli(tmp_path, "compare", "/dev/zero", timeout=120)
    assert_refused(code, err, "/dev/zero", codes=(2,))
    assert rss < 1024, f"peak {rss} MiB"


_CONCURRENT = """
import subprocess, sys
args = [sys.executable, "-m", "partitioner", "batch", sys.argv[1], "--out", sys.argv[2], "--workers", "1", "--no-progress"]
procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
for p in procs:
    out, err = p.communicate(timeout=600)
    print(p.returncode, repr(err.strip()))
"""


@pytest.mark.slow
def test_two_batches_on_one_output_lose_and_duplicate_no_line(tmp_path):
    sweep, out = _sweep(tmp_path, ("greedy", "uniform", "balanced")), tmp_path / "out.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", _CONCURRENT, str(sweep), str(out)], capture_output=True, text=True,
                          timeout=900, cwd=ROOT, env=env)
    assert proc.returncode == 0, proc.stderr
    runs = [line.split(" ", 1) for line in proc.stdout.splitlines()]
    codes = sorted(int(c) for c, _ in runs)
    assert codes in ([0, 0], [0, 2]), proc.stdout  # both ran in turn, or the second was refused at once
    for code, err in runs:
        assert "Traceback" not in err and "internal error" not in err, err
        if code == "2":
            assert "another running sweep" in err, err
    # and once more: whatever is left runs, nothing twice
    again = subprocess.run([sys.executable, "-m", "partitioner", "batch", str(sweep), "--out", str(out), "--workers", "1",
                            "--no-progress", "--json"], capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert again.returncode == 0, again.stderr
    assert strict_json(again.stdout)["ran"] == 0
    records = [strict_json(line) for line in out.read_text().splitlines()]
    keys = [r["key"] for r in records]
    assert len(keys) == len(set(keys)) == 9, keys
