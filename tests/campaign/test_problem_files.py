"""The campaign at the problem-file door: hostile format-v3 files given to ``solve``.

Ties to missing, later or the same layers, tied bytes over the layer's own,
huge or malformed axes, duplicate keys, deep and 50 MB files: exit 2 with one
line naming the file and the field (``solve``, in this process for the
small ones). Random edits of random v3 problems load and solve to strict JSON
or fail with a ``ProblemError``, and ``dp`` never says ``optimal`` where
brute force disagrees.
"""
from __future__ import annotations

import copy
import json
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partitioner import ProblemError, solve
from partitioner.problem import Problem
from partitioner.solvers.base import REL_TOL
from strategies import examples, small_v3_problems
from tests.campaign.doors import assert_input_error, run_cli, strict_json, v3_document


def _over(doc: dict) -> None:
    for entry in doc["layers"][3]["costs"].values():
        entry["tied_weight_bytes"] = entry["weight_bytes"] + 1


def _untie(doc: dict) -> None:
    del doc["layers"][3]["tied_to"]


def _negative(doc: dict) -> None:
    for entry in doc["layers"][3]["costs"].values():
        entry["tied_weight_bytes"] = -5


def _key(layer: int, key: str, like: str = "dp1tp1"):
    return lambda doc: doc["layers"][layer]["costs"].update({key: dict(doc["layers"][layer]["costs"][like])})


# (name, edit of a 4-layer v3 document whose last layer is tied to the first, the field the error names, words)
CASES = [
    ("tied-to-a-missing-layer", lambda d: d["layers"][3].update(tied_to=99), "layers[3].tied_to", "<= 2"),
    ("tied-to-itself", lambda d: d["layers"][3].update(tied_to=3), "layers[3].tied_to", "<= 2"),
    ("tied-to-a-later-layer", lambda d: d["layers"][1].update(tied_to=2), "layers[1].tied_to", "<= 0"),
    ("tied-in-a-cycle", lambda d: (d["layers"][1].update(tied_to=3), d["layers"][3].update(tied_to=1)),
     "layers[1].tied_to", "<= 0"),
    ("first-layer-tied", lambda d: d["layers"][0].update(tied_to=0), "layers[0].tied_to", "no earlier layer"),
    ("tied-negative", lambda d: d["layers"][3].update(tied_to=-1), "layers[3].tied_to", ">= 0"),
    ("tied-string", lambda d: d["layers"][3].update(tied_to="0"), "layers[3].tied_to", "integer"),
    ("tied-bool", lambda d: d["layers"][3].update(tied_to=True), "layers[3].tied_to", "integer"),
    ("tied-huge", lambda d: d["layers"][3].update(tied_to=2**70), "layers[3].tied_to", ""),
    ("tied-bytes-over-the-layer", _over, "layers[3].costs.dp1tp1.tied_weight_bytes", "weight_bytes"),
    ("tied-bytes-without-a-tie", _untie, "layers[3].costs.dp1tp1.tied_weight_bytes", "tied_to"),
    ("tied-bytes-negative", _negative, "layers[3].costs.dp1tp1.tied_weight_bytes", ">= 0"),
    ("dp-beyond-the-cluster", _key(0, "dp8192tp1"), "layers[0].costs.dp8192tp1", "allowed"),
    ("cp-2^40", _key(0, "dp1tp1cp1099511627776"), "layers[0].costs.dp1tp1cp1099511627776", "10^6"),
    ("axis-of-400-digits", _key(0, "dp" + "9" * 400 + "tp1"), "layers[0].costs.dp999", ""),
    ("ep-beyond-the-devices", _key(1, "dp2tp1ep4096"), "layers[1].costs.dp2tp1ep4096", "divide"),
    ("ep-not-dividing", _key(1, "dp2tp1ep4"), "layers[1].costs.dp2tp1ep4", "divide"),
    ("etp-without-ep", _key(1, "dp2tp1etp2"), "layers[1].costs.dp2tp1etp2", "without ep"),
    ("an-axis-twice", _key(1, "dp2tp1cp1cp1"), "layers[1].costs.dp2tp1cp1cp1", "twice"),
    ("two-spellings-of-one-config", _key(1, "dp2tp1cp1", "dp2tp1"), "layers[1].costs.dp2tp1cp1", "two spellings"),
    ("an-axis-at-0", _key(1, "dp2tp1cp0", "dp2tp1"), "layers[1].costs.dp2tp1cp0", ">= 1"),
]


@pytest.mark.parametrize("name, edit, field, words", CASES, ids=[c[0] for c in CASES])
def test_a_hostile_v3_file_exits_2_naming_the_field(tmp_path, capsys, monkeypatch, name, edit, field, words):
    doc = v3_document(4, seed=1)
    edit(doc)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(doc))
    from partitioner.cli import main

    monkeypatch.setattr(sys, "argv", ["partitioner", "solve", str(path), "--method", "dp", "--time-limit", "5"])
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    assert_input_error(info.value.code, captured.err, f"{path}: {field}", words)
    assert captured.out == ""
    with pytest.raises(ProblemError):  # the API door says the same
        Problem.from_dict(doc)


def _duplicate(text: str, key: str) -> str:
    return text.replace(f'"{key}":', f'"{key}": 1, "{key}":', 1)


@pytest.mark.slow
@pytest.mark.parametrize("name, make, words", [
    ("duplicate-top-level-key", lambda: _duplicate(json.dumps(v3_document(4)), "version"), ["duplicate key 'version'"]),
    ("duplicate-cost-field", lambda: _duplicate(json.dumps(v3_document(4)), "fwd_ms"), ["duplicate key 'fwd_ms'"]),
    ("duplicate-tied-to", lambda: _duplicate(json.dumps(v3_document(4)), "tied_to"), ["duplicate key 'tied_to'"]),
    ("deep-meta", lambda: json.dumps({**v3_document(4), "meta": {"x": "@"}}).replace('"@"', "[" * 100 + "]" * 100),
     ["nested"]),
    ("deep-everything", lambda: "[" * 200_000 + "]" * 200_000, ["nested"]),
    ("50-MB-of-values", lambda: json.dumps({**v3_document(4), "meta": {"x": "@"}}).replace('"@"', "[" + "0," * 25_000_000 + "0]"),
     ["values"]),
    ("50-MB-string", lambda: json.dumps({**v3_document(4), "name": "n" * 50_000_000}), ["name", "characters"]),
])
def test_a_hostile_v3_document_is_refused_early_in_bounded_memory(tmp_path, name, make, words):
    path = tmp_path / f"{name}.json"
    path.write_text(make())
    code, out, err, seconds, rss = run_cli(tmp_path, "solve", str(path), "--method", "dp", "--time-limit", "5", "--json",
                                           timeout=300)
    assert_input_error(code, err, str(path), *words)
    assert out == ""
    assert rss < 1536, f"{name}: peak {rss} MiB"


_EDITS = st.sampled_from(["tied_to", "tied_weight_bytes", "weight_bytes", "drop_key", "out_bytes"])
_VALUES = st.one_of(st.integers(-3, 12), st.sampled_from([2**50, 2**50 + 1, 2**63, 1.5, "0", None, True]))


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v3_problems(max_layers=5), st.lists(st.tuples(_EDITS, st.integers(0, 10), _VALUES), min_size=1, max_size=3))
def test_edited_v3_problems_are_refused_or_solved_and_never_a_wrong_optimal(problem, edits):
    doc = copy.deepcopy(problem.to_dict())
    for what, index, value in edits:
        layer = doc["layers"][index % len(doc["layers"])]
        entry = next(iter(layer["costs"].values()))
        if what == "tied_to":
            layer["tied_to"] = value
        elif what == "tied_weight_bytes":
            entry["tied_weight_bytes"] = value
        elif what == "weight_bytes":
            entry["weight_bytes"] = value
        elif what == "drop_key" and len(layer["costs"]) > 1:
            del layer["costs"][next(iter(layer["costs"]))]
        else:
            layer["out_bytes"] = value
    try:
        edited = Problem.from_dict(doc)
    except ProblemError:
        return
    brute = solve(edited, "brute", time_limit=30)
    dp = solve(edited, "dp", time_limit=30)
    for result in (brute, dp):
        strict_json(json.dumps(result.to_dict()))
    if brute.status == "optimal" and dp.status == "optimal":
        assert dp.value == pytest.approx(brute.value, rel=REL_TOL)
    if brute.status == "infeasible":
        assert dp.plan is None, dp.message
    if dp.status == "infeasible":
        assert brute.plan is None, brute.message
