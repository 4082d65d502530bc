"""Problem format v3: the 5D layout keys, their canonical form, tied weights, bad input, result v3.

DESIGN.md (contract), "Problem format v3 -- 5D layouts": keys
``dp{D}tp{T}[cp{C}][ep{E}[etp{F}]][/variant]`` in any spelling, one config
per canonical key, devices D*T*C, rule 5 v3 (E*F | D*T*C), tied weights in
rule 6, ``"version": 3`` results with cp/ep/etp in a config when != 1, and
v2 files loading as v3 with the same answers.
"""
from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from partitioner import evaluate, load_problem, solve
from partitioner.plan import Plan, PlanError, Stage
from partitioner.problem import Layout, Problem, ProblemError
from strategies import small_v2_problems

ROOT = Path(__file__).resolve().parents[2]


def entry(weight: int = 4, act: int = 1, fwd: float = 1.0, **extra) -> dict:
    return {"fwd_ms": fwd, "bwd_ms": 2 * fwd, "weight_bytes": weight, "act_bytes": act, **extra}


def doc_v3() -> dict:
    """One node of 4 GPUs; a dense layer and a MoE layer with cp and ep keys; the head tied to layer 0."""
    return {
        "version": 3,
        "name": "v3-small",
        "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu_memory_bytes": 100,
                    "intra_node_GBps": 1.0, "inter_node_GBps": 1.0},
        "training": {"microbatches": 2, "objective": "bottleneck"},
        "layers": [
            {"name": "embed", "module": "llm", "out_bytes": 64,
             "costs": {"dp4tp1": entry(40), "dp2tp1cp2": entry(40), "dp1tp4": entry(10)}},
            {"name": "moe", "module": "llm", "out_bytes": 64,
             "costs": {"dp4tp1": entry(40), "dp4tp1ep4": entry(10), "dp2tp1cp2ep2": entry(20),
                       "dp2tp1cp2": entry(40), "dp1tp4": entry(10), "dp2tp2ep2etp2": entry(10)}},
            {"name": "head", "module": "llm", "out_bytes": 0, "tied_to": 0,
             "costs": {"dp4tp1": entry(40, tied_weight_bytes=40), "dp2tp1cp2": entry(40, tied_weight_bytes=30),
                       "dp1tp4": entry(10, tied_weight_bytes=10)}},
        ],
    }


# --------------------------------------------------------------------------- keys


@pytest.mark.parametrize(
    "spelling, canonical",
    [
        ("dp4tp2", "dp4tp2"),
        ("dp4tp2cp1ep1", "dp4tp2"),
        ("dp4tp2ep8etp1", "dp4tp2ep8"),
        ("dp2tp2cp2", "dp2tp2cp2"),
        ("dp2cp2tp2", "dp2tp2cp2"),
        ("dp4tp2cp2ep8etp2/zero1", "dp4tp2cp2ep8etp2/zero1"),
        ("dp4tp2cp1ep8etp1/zero1", "dp4tp2ep8/zero1"),
    ],
)
def test_every_spelling_parses_to_its_canonical_key(spelling, canonical):
    layout = Layout.parse(spelling)
    assert layout.key == canonical
    assert Layout.parse(canonical) == layout


def test_a_v3_config_has_dp_tp_cp_devices_and_its_own_mesh():
    lay = Layout.parse("dp2tp2cp2ep4etp2")
    assert (lay.dp, lay.tp, lay.cp, lay.ep, lay.etp) == (2, 2, 2, 4, 2)
    assert lay.devices == 8  # ep and etp fold onto the dp*tp*cp devices
    assert lay.mesh == (2, 2, 2) and Layout.parse("dp2tp2ep2").mesh == (2, 2) == Layout(2, 2).mesh
    assert Layout(2, 2).config_doc() == {"dp": 2, "tp": 2}
    assert lay.config_doc() == {"dp": 2, "tp": 2, "cp": 2, "ep": 4, "etp": 2}


def test_every_canonical_key_parses_back_to_its_config():
    """``to_dict`` writes canonical keys, and the loader reads every one of them back (issue 35: ``dp2tp2ep1etp2``
    was written ``dp2tp2etp2``, which the loader refuses: etp without ep)."""
    for dp, tp, cp in itertools.product((1, 2, 4), repeat=3):
        d = dp * tp * cp
        for ep, etp in itertools.product((1, 2, 4, 8), (1, 2, 4)):
            if d % (ep * etp):
                continue
            for variant in ("", "zero1"):
                layout = Layout(dp, tp, variant, cp, ep, etp)
                assert Layout.parse(layout.key) == layout, layout.key
    assert Layout.parse("dp2tp2ep1etp2").key == "dp2tp2ep1etp2"
    doc = {"version": 3, "cluster": {"nodes": 1, "gpus_per_node": 4, "gpu_memory_bytes": 100, "intra_node_GBps": 1.0,
                                     "inter_node_GBps": 1.0},
           "training": {"microbatches": 1}, "layers": [{"name": "moe", "costs": {
               "dp2tp2ep1etp2": {"fwd_ms": 1.0, "bwd_ms": 1.0, "weight_bytes": 1, "act_bytes": 1}}}]}
    problem = Problem.from_dict(doc)
    assert Problem.from_dict(problem.to_dict()) == problem


@pytest.mark.parametrize(
    "key, words",
    [
        ("dp2tp2cp2cp2", "names the axis cp twice"),
        ("dp2dp2tp1", "names the axis dp twice"),
        ("dp2tp2etp2", "etp without ep"),
        ("dp2tp2cp0", "cp must be >= 1"),
        ("dp2tp2ep0", "ep must be >= 1"),
        ("dp2tp2ep8", "must divide dp*tp*cp = 4"),
        ("dp2tp1cp2ep2etp4", "ep*etp = 8 must divide"),
        ("tp2cp2", "must name dp"),
        ("dp2tp2xp2", "cost key must look like"),
    ],
)
def test_bad_keys_are_rejected_with_the_reason(key, words):
    with pytest.raises(ValueError, match=words.replace("*", r"\*")):
        Layout.parse(key)


def _with(doc: dict, layer: int, key: str, value) -> dict:
    doc = copy.deepcopy(doc)
    doc["layers"][layer]["costs"][key] = value
    return doc


BAD_DOCUMENTS = [
    ("two-spellings", lambda d: _with(d, 0, "dp2tp1cp2ep1", entry(40)), "layers[0].costs.dp2tp1cp2ep1",
     "two spellings of 'dp2tp1cp2'"),
    ("axis-twice", lambda d: _with(d, 1, "dp2tp1cp2cp1", entry()), "layers[1].costs.dp2tp1cp2cp1", "twice"),
    ("etp-without-ep", lambda d: _with(d, 1, "dp4tp1etp2", entry()), "layers[1].costs.dp4tp1etp2", "etp without ep"),
    ("axis-below-one", lambda d: _with(d, 1, "dp4tp1cp0", entry()), "layers[1].costs.dp4tp1cp0", "cp must be >= 1"),
    ("ep-not-dividing", lambda d: _with(d, 1, "dp2tp1cp2ep8", entry()), "layers[1].costs.dp2tp1cp2ep8", "must divide"),
    ("size-not-allowed", lambda d: _with(d, 1, "dp2tp2cp2", entry()), "layers[1].costs.dp2tp2cp2",
     "dp*tp*cp=8 is not an allowed stage size"),
    ("v3-key-in-v2", lambda d: {**d, "version": 2}, "layers[0].costs.dp2tp1cp2", "need format version 3"),
    ("tied-to-later", lambda d: _tied(d, 1, 1), "layers[1].tied_to", "must be <= 0"),
    ("tied-in-v2", lambda d: {**_plain_v2(d), "layers": [*_plain_v2(d)["layers"][:2], {**_plain_v2(d)["layers"][2], "tied_to": 0}]},
     "layers[2].tied_to", "need format version 3"),
    ("tied-bytes-too-big", lambda d: _with(d, 2, "dp1tp4", entry(10, tied_weight_bytes=11)),
     "layers[2].costs.dp1tp4.tied_weight_bytes", "must be <= weight_bytes = 10"),
    ("tied-bytes-untied", lambda d: _with(d, 1, "dp1tp4", entry(10, tied_weight_bytes=5)),
     "layers[1].costs.dp1tp4.tied_weight_bytes", "needs tied_to"),
]


def _tied(doc: dict, layer: int, target: int) -> dict:
    doc = copy.deepcopy(doc)
    doc["layers"][layer]["tied_to"] = target
    return doc


def _plain_v2(doc: dict) -> dict:
    """The document without v3 keys or ties, as version 2."""
    doc = copy.deepcopy(doc)
    doc["version"] = 2
    for layer in doc["layers"]:
        layer.pop("tied_to", None)
        layer["costs"] = {k: {f: v for f, v in e.items() if f != "tied_weight_bytes"}
                          for k, e in layer["costs"].items() if not Layout.parse(k).is_v3}
    return doc


@pytest.mark.parametrize("name, mutate, path, words", BAD_DOCUMENTS, ids=[b[0] for b in BAD_DOCUMENTS])
def test_bad_v3_documents_name_the_field(name, mutate, path, words):
    with pytest.raises(ProblemError) as err:
        Problem.from_dict(mutate(doc_v3()))
    assert err.value.path == path
    assert words in err.value.reason


@pytest.mark.parametrize("name, mutate, path, words", BAD_DOCUMENTS[:5], ids=[b[0] for b in BAD_DOCUMENTS[:5]])
def test_bad_v3_input_exits_2_with_one_line_naming_the_key(cli, tmp_path, name, mutate, path, words):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(mutate(doc_v3())))
    proc = cli("solve", bad, "--method", "brute")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert str(bad) in lines[0] and path in lines[0] and words in lines[0]


def test_a_v3_problem_round_trips_with_its_ties():
    p = Problem.from_dict(doc_v3())
    assert p.version == 3 and p.ties == ((0, 2),)
    assert p.layers[2].tied_to == 0 and p.layers[2].costs[Layout(2, 1, "", 2)].tied_weight_bytes == 30
    assert Layout(4, 1, "", 1, 4) in p.layers[1].costs
    again = Problem.from_dict(p.to_dict())
    assert again == p and again.ties == p.ties


# --------------------------------------------------------------------------- v2 files are v3 files


def _same_answers(old: Problem, methods=("brute", "dp")) -> None:
    doc = old.to_dict()
    doc["version"] = 3
    new = Problem.from_dict(doc)
    for method in methods:
        a, b = solve(old, method), solve(new, method)
        assert a.status == b.status
        if a.plan is None:
            continue
        assert b.value == a.value
        assert b.version == 3 and a.version == old.version
        assert [s.segment_configs(old) for s in a.plan.stages] == [s.segment_configs(new) for s in b.plan.stages]


def test_the_v2_lesson_read_as_v3_gives_the_same_answer():
    _same_answers(load_problem(ROOT / "examples" / "colocated_1node.json"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_v2_problems(max_layers=5))
def test_random_v2_problems_read_as_v3_give_the_same_answers(problem):
    _same_answers(problem)


# --------------------------------------------------------------------------- rule 5 v3, tied weights, result v3


def _plan(configs, devices: int = 4) -> Plan:
    return Plan((Stage.from_configs(0, 2, devices, configs),))


def test_rule5_v3_devices_are_dp_tp_cp():
    p = Problem.from_dict(doc_v3())
    cp2 = Layout.parse("dp2tp1cp2")
    ev = evaluate(p, _plan([cp2, cp2, cp2]))
    assert ev.stages[0].devices == 4
    with pytest.raises(PlanError) as err:
        evaluate(p, Plan((Stage(0, 2, 4, 2, 1),)))  # dp2tp1 on 4 devices: 2 != 4
    assert err.value.rule == 5 and "dp*tp = 2*1 must equal its 4 devices" in str(err.value)
    with pytest.raises(PlanError) as err:
        evaluate(p, Plan((Stage(0, 2, 4, 1, 1, cp=2),)))
    assert err.value.rule == 5 and "dp*tp*cp = 1*1*2" in str(err.value)


def test_rule6_counts_a_tied_copy_once_on_a_stage_holding_both():
    p = Problem.from_dict(doc_v3())
    cp2 = Layout.parse("dp2tp1cp2")
    ev = evaluate(p, _plan([cp2, cp2, cp2]))
    # 40 + 40 + (40 - 30) weights, stash min(m, P - p) = 1 x (1 + 1 + 1) activations
    assert ev.stages[0].weight_bytes == 90 and ev.stages[0].memory_bytes == 93
    # without the tie it would need 123 > 100 bytes: the plan is valid only with the tie
    untied = copy.deepcopy(doc_v3())
    untied["layers"][2].pop("tied_to")
    for e in untied["layers"][2]["costs"].values():
        e.pop("tied_weight_bytes")
    with pytest.raises(PlanError) as err:
        evaluate(Problem.from_dict(untied), _plan([cp2, cp2, cp2]))
    assert err.value.rule == 6


def test_a_stage_without_the_tied_layer_counts_the_whole_copy():
    doc = doc_v3()
    doc["cluster"]["gpus_per_node"] = 8
    doc["cluster"]["gpu_memory_bytes"] = 1000
    for layer in doc["layers"]:
        layer["costs"] = {k.replace("dp4tp1", "dp2tp2"): e for k, e in layer["costs"].items() if "cp" not in k and "etp" not in k}
    p = Problem.from_dict(doc)
    ev = evaluate(p, Plan((Stage(0, 1, 4, 1, 4), Stage(2, 2, 4, 1, 4))))
    assert ev.stages[1].weight_bytes == 10  # the head's whole copy: layer 0 is on stage 0
    ev = evaluate(p, Plan((Stage(0, 0, 4, 1, 4), Stage(1, 2, 4, 1, 4))))
    assert ev.stages[1].weight_bytes == 10 + 10


def test_result_v3_names_cp_ep_etp_only_when_not_one():
    p = Problem.from_dict(doc_v3())
    result = solve(p, "brute")
    assert result.status == "optimal"
    doc = result.to_dict()
    assert doc["version"] == 3
    for stage in doc["plan"]["stages"]:
        for config in stage["configs"]:
            assert set(config) <= {"dp", "tp", "cp", "ep", "etp", "variant"}
            assert all(config[a] != 1 for a in ("cp", "ep", "etp") if a in config)
    again = Plan.from_dict(doc)
    assert evaluate(p, again).value == result.value
