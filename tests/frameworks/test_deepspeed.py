"""DeepSpeed exports through DeepSpeed 0.19's own ``PipelineModule`` on CPU gloo ranks.

Every expressible DeepSpeed export of the tier is executed verbatim on W
forked ranks (``ds_ranks.py``: gloo on localhost, ``DS_ACCELERATOR=cpu``).
DeepSpeed builds the topology's groups and calls the snippet's
``_partition_layers``; each rank must build exactly its planned stage's
layers, the requested topology must be the plan's (pp, tp, dp), and the
``ds_config`` batch must give the plan's m. A plan that is not
expressible must say why.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.framework_checks import PlannedJob, check_deepspeed_config, deepspeed_config
from partitioner.frameworks.export import export_result
from tests.frameworks.plans import NOT_INSTALLED, PLANS, free_port, planned

pytest.importorskip("deepspeed", reason=NOT_INSTALLED)

HELPER = Path(__file__).with_name("ds_ranks.py")


pytestmark = pytest.mark.slow  # the framework tier / subprocess runs: minutes on 2 cores


@pytest.fixture(scope="module")
def exports():
    return {c.id: export_result(planned(c.id), "deepspeed") for c in PLANS}


@pytest.fixture(scope="module")
def ranks(exports, tmp_path_factory):
    jobs = [{"id": k, "snippet": e.snippet, "layers": len(e.settings["layers"])} for k, e in exports.items() if e.expressible]
    if not jobs:
        return {}
    world = math.lcm(*(exports[j["id"]].settings["num_stages"] for j in jobs))
    path = tmp_path_factory.mktemp("ds") / "jobs.json"
    path.write_text(json.dumps(jobs))
    proc = subprocess.run([sys.executable, str(HELPER), str(path), str(world), str(free_port())],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[:4000] + "\n...\n" + proc.stderr[-2000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert doc["exitcodes"] == [0] * world, proc.stderr[-3000:]
    out: dict[str, list[dict]] = {}
    for r in doc["ranks"]:
        out.setdefault(r["id"], []).append(r)
    return {"world": world, "by_plan": out}


@pytest.mark.slow
@pytest.mark.parametrize("case", [c.id for c in PLANS])
def test_deepspeed_export_builds_the_planned_stages_or_says_why(case, exports, ranks):
    exp = exports[case]
    result = planned(case)
    if not exp.expressible:
        assert exp.reasons and "PlannedPipelineModule(" not in exp.snippet
        return
    stages = result.plan.stages
    P, world = len(stages), ranks["world"]
    seen = ranks["by_plan"][case]
    assert len(seen) == world
    for r in seen:
        s = r["stage"]
        assert s == r["rank"] // (world // P)  # DeepSpeed's topology: pipe is the outermost axis
        assert (r["start"], r["stop"]) == (stages[s].first_layer, stages[s].last_layer + 1)
        assert r["built"] == r["stop"] - r["start"]
        assert r["parts"] == exp.settings["parts"]
        assert r["asked"] == {"num_pp": P, "num_mp": stages[0].tp, "num_dp": stages[0].dp}
    assert {r["stage"] for r in seen} == set(range(P))
    ds = exp.settings["ds_config"]
    assert ds["train_batch_size"] == ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * stages[0].dp
    assert ds["gradient_accumulation_steps"] == result.problem.microbatches


@pytest.mark.parametrize("case", [c.id for c in PLANS])
def test_ds_config_passes_deepspeeds_validation(case, exports):
    """DeepSpeedConfig checks the batch triple and reads the ZeRO stage; PipelineEngine accepts stages 0 and 1 only.

    benchmarks/framework_checks.py: the batch gives m, the ZeRO stage is the plan's (at most 1), the activation
    checkpoint interval per stage is its full recompute.
    """
    exp = exports[case]
    if not exp.expressible:
        return
    check_deepspeed_config(PlannedJob.from_result(planned(case)), exp)


def test_ds_config_refuses_a_batch_that_misses_m():
    """The check can fail: a micro batch x accumulation x dp that is not the train batch is refused."""
    with pytest.raises(AssertionError, match="train_batch_size is not equal"):
        deepspeed_config({"train_batch_size": 512, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 64}, 8)
