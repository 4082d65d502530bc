"""Problem format v1: loading, round trips, and one test per class of malformed input."""
from __future__ import annotations

import copy
import json
import math

import pytest

from partitioner.problem import Layout, Problem, ProblemError, dump_problem, load_problem

BASE = {
    "version": 1,
    "name": "tiny",
    "cluster": {
        "nodes": 2,
        "gpus_per_node": 4,
        "gpu_memory_bytes": 1000,
        "intra_node_GBps": 100.0,
        "inter_node_GBps": 10.0,
    },
    "training": {"microbatches": 4, "objective": "bottleneck"},
    "layers": [
        {
            "name": f"l{i}",
            "module": "llm",
            "out_bytes": 1000,
            "costs": {
                "dp1tp1": {"fwd_ms": 1.0, "bwd_ms": 2.0, "weight_bytes": 10, "act_bytes": 5},
                "dp2tp1": {"fwd_ms": 0.5, "bwd_ms": 1.0, "weight_bytes": 10, "act_bytes": 3},
                "dp2tp2": {"fwd_ms": 0.3, "bwd_ms": 0.6, "weight_bytes": 5, "act_bytes": 2},
            },
        }
        for i in range(4)
    ],
}


def doc(**changes):
    """A copy of BASE with dotted-path changes; value DELETE removes the key."""
    d = copy.deepcopy(BASE)
    for path, value in changes.items():
        keys = path.split("__")
        node = d
        for k in keys[:-1]:
            node = node[int(k)] if isinstance(node, list) else node[k]
        last = keys[-1]
        if isinstance(node, list):
            last = int(last)
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return d


DELETE = object()


def error_of(data) -> str:
    with pytest.raises(ProblemError) as info:
        Problem.from_dict(data, source="p.json")
    return str(info.value)


def test_base_document_is_valid():
    p = Problem.from_dict(BASE)
    assert p.num_layers == 4 and p.num_devices == 8
    assert p.stages.min == 1 and p.stages.max == 4
    assert p.layouts() == (Layout(1, 1), Layout(2, 1), Layout(2, 2))
    assert p.cluster.allowed_sizes() == (1, 2, 4, 8)


def test_round_trip_dict_json_and_yaml(tmp_path):
    p = Problem.from_dict(BASE)
    assert Problem.from_dict(p.to_dict()) == p
    for suffix in (".json", ".yaml"):
        path = tmp_path / f"p{suffix}"
        dump_problem(p, path)
        assert load_problem(path) == p


def test_shared_examples_load(examples):
    lesson = load_problem(examples / "rebalance_4gpu.json")
    assert lesson.num_layers == 34 and lesson.stages.min == lesson.stages.max == 4
    toy = load_problem(examples / "vla_toy_2x4.json")
    assert toy.objective == "iteration" and toy.num_devices == 8


def test_the_design_example_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = doc()
    data["layers"][3]["costs"]["dp2tp1"]["fwd_ms"] = -1
    (tmp_path / "p.json").write_text(json.dumps(data))
    with pytest.raises(ProblemError) as info:
        load_problem("p.json")
    assert str(info.value) == "p.json: layers[3].costs.dp2tp1.fwd_ms: must be >= 0, got -1"


def test_stages_forms():
    s = Problem.from_dict(doc(stages=3)).stages
    assert (s.min, s.max) == (3, 3)
    s = Problem.from_dict(doc(stages={"min": 2})).stages
    assert (s.min, s.max) == (2, 4)
    s = Problem.from_dict(doc(stages={"max": 2})).stages
    assert (s.min, s.max) == (1, 2)


# (case id, document, field path expected in the message, words expected in the message)
MALFORMED = [
    ("not-an-object", [1, 2], "", "must be an object"),
    ("missing-version", doc(version=DELETE), "version", "is missing"),
    ("unknown-version", doc(version=4), "version", "unknown format version 4"),
    ("version-bool", doc(version=True), "version", "unknown format version"),
    ("unknown-field", doc(extra=1), "", "unknown field 'extra'"),
    ("missing-cluster", doc(cluster=DELETE), "cluster", "is missing"),
    ("missing-training", doc(training=DELETE), "training", "is missing"),
    ("missing-layers", doc(layers=DELETE), "layers", "is missing"),
    ("cluster-not-object", doc(cluster=[1]), "cluster", "must be an object"),
    ("missing-nodes", doc(cluster__nodes=DELETE), "cluster.nodes", "is missing"),
    ("nodes-string", doc(cluster__nodes="2"), "cluster.nodes", "must be an integer, got string '2'"),
    ("nodes-bool", doc(cluster__nodes=True), "cluster.nodes", "boolean"),
    ("nodes-fraction", doc(cluster__nodes=1.5), "cluster.nodes", "must be an integer"),
    ("nodes-zero", doc(cluster__nodes=0), "cluster.nodes", "must be >= 1, got 0"),
    ("gpus-negative", doc(cluster__gpus_per_node=-4), "cluster.gpus_per_node", "must be >= 1"),
    ("memory-zero", doc(cluster__gpu_memory_bytes=0), "cluster.gpu_memory_bytes", "must be >= 1"),
    ("intra-zero", doc(cluster__intra_node_GBps=0), "cluster.intra_node_GBps", "must be > 0"),
    ("inter-negative", doc(cluster__inter_node_GBps=-5), "cluster.inter_node_GBps", "must be > 0"),
    ("bandwidth-nan", doc(cluster__inter_node_GBps=math.nan), "cluster.inter_node_GBps", "must be finite"),
    ("bandwidth-inf", doc(cluster__intra_node_GBps=math.inf), "cluster.intra_node_GBps", "must be finite"),
    ("bandwidth-bool", doc(cluster__intra_node_GBps=False), "cluster.intra_node_GBps", "boolean"),
    ("microbatches-zero", doc(training__microbatches=0), "training.microbatches", "must be >= 1"),
    ("microbatches-negative", doc(training__microbatches=-3), "training.microbatches", "must be >= 1"),
    ("microbatches-missing", doc(training__microbatches=DELETE), "training.microbatches", "is missing"),
    ("objective-unknown", doc(training__objective="fastest"), "training.objective", "must be one of"),
    ("layers-empty", doc(layers=[]), "layers", "at least one layer"),
    ("layers-not-list", doc(layers={"a": 1}), "layers", "must be a list"),
    ("layer-not-object", doc(layers__0=3), "layers[0]", "must be an object"),
    ("costs-missing", doc(layers__1__costs=DELETE), "layers[1].costs", "is missing"),
    ("costs-empty", doc(layers__1__costs={}), "layers[1].costs", "no layout usable"),
    ("layout-key-bad", doc(layers__2__costs={"dp2x1": BASE["layers"][0]["costs"]["dp1tp1"]}), "layers[2].costs.dp2x1", "dp<int>tp<int>"),
    ("layout-key-zero", doc(layers__2__costs={"dp0tp1": BASE["layers"][0]["costs"]["dp1tp1"]}), "layers[2].costs.dp0tp1", "dp<int>tp<int>"),
    ("layout-size", doc(layers__2__costs={"dp3tp1": BASE["layers"][0]["costs"]["dp1tp1"]}), "layers[2].costs.dp3tp1", "not an allowed stage size"),
    ("layout-too-big", doc(layers__2__costs={"dp16tp1": BASE["layers"][0]["costs"]["dp1tp1"]}), "layers[2].costs.dp16tp1", "not an allowed stage size"),
    ("layout-tp", doc(layers__2__costs={"dp1tp8": BASE["layers"][0]["costs"]["dp1tp1"]}), "layers[2].costs.dp1tp8", "exceeds gpus_per_node"),
    ("cost-field-missing", doc(layers__0__costs__dp1tp1__bwd_ms=DELETE), "layers[0].costs.dp1tp1.bwd_ms", "is missing"),
    ("cost-negative", doc(layers__3__costs__dp2tp1__fwd_ms=-1), "layers[3].costs.dp2tp1.fwd_ms", "must be >= 0, got -1"),
    ("cost-nan", doc(layers__0__costs__dp1tp1__fwd_ms=math.nan), "layers[0].costs.dp1tp1.fwd_ms", "must be finite"),
    ("cost-string", doc(layers__0__costs__dp1tp1__bwd_ms="2"), "layers[0].costs.dp1tp1.bwd_ms", "must be a number"),
    ("cost-bool", doc(layers__0__costs__dp1tp1__bwd_ms=True), "layers[0].costs.dp1tp1.bwd_ms", "boolean"),
    ("bytes-fraction", doc(layers__0__costs__dp1tp1__weight_bytes=1.5), "layers[0].costs.dp1tp1.weight_bytes", "integer"),
    ("bytes-negative", doc(layers__0__costs__dp1tp1__act_bytes=-2), "layers[0].costs.dp1tp1.act_bytes", "must be >= 0"),
    ("out-bytes-negative", doc(layers__0__out_bytes=-1), "layers[0].out_bytes", "must be >= 0"),
    ("name-not-string", doc(layers__0__name=5), "layers[0].name", "must be a string"),
    ("stages-min-gt-max", doc(stages={"min": 3, "max": 2}), "stages", "min (3) must be <= max (2)"),
    ("stages-too-many", doc(stages=9), "stages", "must be <= min(layers, devices) = 4"),
    ("stages-zero", doc(stages=0), "stages", "must be >= 1"),
    ("stages-max-too-big", doc(stages={"max": 5}), "stages.max", "must be <= min(layers, devices) = 4"),
    ("stages-unknown-key", doc(stages={"lo": 1}), "stages", "unknown field 'lo'"),
]


@pytest.mark.parametrize("case,data,path,words", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_input_is_rejected_with_its_path(case, data, path, words):
    message = error_of(data)
    assert message.startswith("p.json: ")
    if path:
        assert f": {path}: " in message, message
    assert words in message, message


def test_not_json_and_not_yaml_files(tmp_path):
    bad_json = tmp_path / "p.json"
    bad_json.write_text('{"version": 1,, }')
    with pytest.raises(ProblemError, match=r"p.json: not valid JSON: line 1 column"):
        load_problem(bad_json)
    bad_yaml = tmp_path / "p.yaml"
    bad_yaml.write_text("version: 1\n  cluster: [\n")
    with pytest.raises(ProblemError, match=r"p.yaml: not valid YAML"):
        load_problem(bad_yaml)
    with pytest.raises(ProblemError, match="file not found"):
        load_problem(tmp_path / "missing.json")


def test_json_nan_and_infinity_literals_are_rejected(tmp_path):
    text = json.dumps(BASE).replace('"fwd_ms": 1.0', '"fwd_ms": NaN', 1)
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(ProblemError, match=r"layers\[0\].costs.dp1tp1.fwd_ms: must be finite"):
        load_problem(path)
    path.write_text(json.dumps(BASE).replace('"bwd_ms": 2.0', '"bwd_ms": Infinity', 1))
    with pytest.raises(ProblemError, match=r"layers\[0\].costs.dp1tp1.bwd_ms: must be finite"):
        load_problem(path)


def test_topology_field_is_validated():
    edges = [[0, "sw", 10.0]] + [[d, "sw", 10.0] for d in range(1, 8)]
    assert Problem.from_dict(doc(cluster__topology={"edges": edges})).cluster.topology is not None
    message = error_of(doc(cluster__topology={"edges": edges[:-1]}))
    assert "GPU 7 is on no edge" in message
    message = error_of(doc(cluster__topology={"edges": [[0, 9, 1.0]]}))
    assert "cluster.topology.edges[0][1]" in message
    message = error_of(doc(cluster__topology={"edges": [[0, "sw", -1.0]]}))
    assert "cluster.topology.edges[0][2]: must be > 0" in message


@pytest.mark.slow
@pytest.mark.parametrize("case,data,path,words", MALFORMED[::4], ids=[m[0] for m in MALFORMED[::4]])
def test_cli_exits_2_with_the_field_path(cli, tmp_path, case, data, path, words):
    f = tmp_path / "p.json"
    f.write_text(json.dumps(data, allow_nan=True))
    for command in (["validate", f], ["solve", f, "--method", "greedy"]):
        proc = cli(*command)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr + proc.stdout
        assert words in proc.stderr
        if path:
            assert path in proc.stderr


@pytest.mark.slow
def test_cli_validate_accepts_examples(cli, examples):
    proc = cli("validate", examples / "vla_toy_2x4.json", "--json")
    assert proc.returncode == 0
    summary = json.loads(proc.stdout)
    assert summary["valid"] and summary["devices"] == 8 and summary["stages"] == {"min": 6, "max": 6}
