"""The campaign's hang check: ``solve --time-limit 5`` on 200- and 5,000-layer v3 files answers in time.

Issue 35: dp, greedy and brute ran past ``--time-limit 5`` on 200-5,000-layer
v3 files. The bound is generous on purpose (a loaded 2-core machine): the
wall time of ``solve`` may exceed that of ``validate`` on the same file (the
interpreter, the imports, the load) by at most three times the limit plus
10 s; the speed target itself is a benchmark row, not this test.
"""
from __future__ import annotations

import json

import pytest

from benchmarks.synthetic import tied_v3_document
from tests.campaign.doors import assert_clean, run_cli, strict_json

LIMIT = 5.0
SIZES = {200: ("dp", "greedy", "brute", "cpsat", "milp"), 5000: ("dp", "greedy", "brute", "cpsat", "milp")}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("big-v3")
    made = {}
    for layers in SIZES:
        path = folder / f"v3-{layers}.json"
        path.write_text(json.dumps(tied_v3_document(layers, 4, 8, seed=layers)))
        made[layers] = path
    return made


@pytest.mark.slow
@pytest.mark.parametrize("layers, method", [(n, m) for n, methods in SIZES.items() for m in methods])
def test_a_large_v3_file_is_answered_within_the_limit(tmp_path, files, layers, method):
    path = files[layers]
    code, _, err, load_seconds, _ = run_cli(tmp_path, "validate", str(path), timeout=600)
    assert code == 0, err
    code, out, err, seconds, _ = run_cli(tmp_path, "solve", str(path), "--method", method, "--time-limit", str(LIMIT),
                                         "--json", timeout=600)
    assert_clean(code, err)
    result = strict_json(out) if out.strip() else {}
    assert seconds <= load_seconds + 3 * LIMIT + 10, (
        f"{method} on {layers} layers: {seconds:.1f} s, validate {load_seconds:.1f} s, limit {LIMIT:g} s "
        f"({result.get('status')}: {result.get('message', '')[:200]})")
