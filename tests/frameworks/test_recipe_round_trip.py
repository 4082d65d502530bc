"""Every shipped recipe through every target: ``estimate`` reproduces the plan ``export`` writes, and the framework
tier accepts that export.

For each published recipe shipped with a preset (``partitioner/presets/recipes``) and each target, the
recipe is estimated in the target's terms, exported, read back by ``--recipe-format auto`` and estimated
again (:func:`tests.planning.recipes.round_trip.round_trip`: the same stages, configs, schedule, m, times
and memory, or the exporter's refusal by the framework's rule); an expressible export then runs through the
framework's own checks (``benchmarks/framework_checks.py``: megatron-core's TransformerConfig and layout,
torchtitan's ConfigManager, ParallelDims and split, DeepSpeed's DeepSpeedConfig).
"""
from __future__ import annotations

import pytest

from benchmarks.framework_checks import (
    PlannedJob,
    check_job,
    check_torchtitan_config,
    check_torchtitan_schedule,
    torchtitan_parse,
)
from partitioner import Recipe
from partitioner.frameworks.torchtitan.models import NO_FAMILY
from partitioner.planning.results import stage_knobs
from partitioner.presets.recipes import published_recipes
from tests.frameworks.plans import NOT_INSTALLED
from tests.planning.recipes.round_trip import ROUND_TRIP_TARGETS, round_trip

pytestmark = pytest.mark.slow  # the framework tier

SHIPPED = published_recipes()


def _job(est) -> PlannedJob:
    """What the tier's checks read of an estimate's plan."""
    hints = [h.to_dict() for h in est.problem.workload.layers]
    knobs = [k.to_dict() for k in stage_knobs(est.evaluation)]
    return PlannedJob(est.plan, est.schedule, est.virtual_stages, est.microbatches,
                      est.problem.cluster.num_devices, hints, knobs, None)


@pytest.mark.parametrize("target", ROUND_TRIP_TARGETS)
@pytest.mark.parametrize("shipped", SHIPPED, ids=[r.path.rsplit("/", 1)[-1] for r in SHIPPED])
def test_shipped_recipe_round_trips_and_the_tier_accepts_it(shipped, target, tmp_path):
    pytest.importorskip({"megatron": "megatron.core", "torchtitan": "torchtitan", "deepspeed": "deepspeed"}[target],
                        reason=NOT_INSTALLED)
    recipe = Recipe.from_fields(shipped.fields)
    first, exported = round_trip(shipped.model, recipe, target, tmp_path, shipped.cluster, shipped.nodes)
    if exported is None:
        return
    if target == "torchtitan" and NO_FAMILY.rsplit(".", 1)[0] in exported.snippet:
        # no torchtitan model family (GLM-4.5V): the registry function is the user's to write, so the tier checks
        # the overrides (on torchtitan's debug model) and the schedule
        overrides = [tok for line in exported.settings["overrides"] for tok in line.split(" ")]
        check_torchtitan_config(torchtitan_parse(["--module", "llama3", "--config", "llama3_debugmodel", *overrides]),
                                exported.settings, first.microbatches)
        check_torchtitan_schedule(_job(first), exported.settings)
        return
    assert check_job(_job(first), exported.to_dict(), target)
