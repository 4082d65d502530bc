"""The campaign at the doors it does not draw: ``estimate``'s report given to ``export`` and ``evaluate``.

Issue 35, tried by hand: ``export`` of an ``estimate --json`` report refused
it as ``stages[0].configs[0]: must be an object`` -- the reader took the
report's own per-stage table for the plan, though the report carries its plan
under ``plan``. A result's ``plan`` is now read first, and ``export`` says
what the file is and what it reads instead.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from partitioner.plan import Plan
from tests.campaign.doors import assert_input_error, run_cli

ESTIMATE = ("estimate", "--model", "llava-1.5-7b", "--cluster", "dgx-h100", "--nodes", "1", "--gbs", "64",
            "--tp", "2", "--pp", "2", "--json")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> tuple[dict, str]:
    tmp = tmp_path_factory.mktemp("estimate")
    code, out, err, _, _ = run_cli(tmp, *ESTIMATE)
    assert code == 0, err
    path = tmp / "estimate.json"
    path.write_text(out)
    return json.loads(out), str(path)


def test_the_plan_of_an_estimate_report_is_its_plan_not_its_stage_table(report):
    doc, _ = report
    assert isinstance(doc["stages"], list) and isinstance(doc["plan"], dict)  # both keys, as estimate writes them
    plan = Plan.from_dict(doc)
    expected = [(s["first_layer"], s["last_layer"], s["devices"]) for s in doc["plan"]["stages"]]
    assert [(s.first_layer, s.last_layer, s.devices) for s in plan.stages] == expected


@pytest.mark.parametrize("target", ["megatron", "torchtitan", "deepspeed"])
def test_export_of_an_estimate_report_says_what_it_is_in_one_line_exit_2(report, tmp_path, target):
    _, path = report
    code, out, err, _, _ = run_cli(tmp_path, "export", path, "--to", target)
    assert out == ""
    assert_input_error(code, err, path, "estimate --json", "partitioner plan")


def test_an_unwritable_target_plans_folder_is_refused_before_the_plan(tmp_path, capsys, monkeypatch):
    """``plan --target-plans DIR`` under a file: one line, exit 2, and no planning spent first (was: after it)."""
    import sys

    import partitioner.planning
    from partitioner.cli import main

    def no_planning(*args, **kwargs):
        raise AssertionError("planned before the folder was checked")

    monkeypatch.setattr(partitioner.planning, "run_plan", no_planning)
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    folder = blocker / "plans"
    monkeypatch.setattr(sys, "argv", ["partitioner", "plan", "--model", "llava-1.5-7b", "--cluster", "dgx-h100",
                                      "--nodes", "1", "--global-batch", "64", "--time-limit", "10", "--target", "any",
                                      "--target-plans", str(folder)])
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_input_error(info.value.code, captured.err, str(folder), "--target-plans", "cannot write in the folder")


@pytest.mark.parametrize("command", [["plan", "--global-batch", "64", "--time-limit", "10"], ["estimate", "--gbs", "64"]])
def test_a_gantt_of_an_unknown_picture_format_is_refused_at_the_door(tmp_path, capsys, monkeypatch, command):
    """``--gantt g.html`` was an internal error (exit 3) after the whole plan or estimate; now exit 2 first."""
    import sys

    import partitioner.planning
    import partitioner.planning.recipes.estimate

    def not_reached(*args, **kwargs):
        raise AssertionError("planned or estimated before --gantt was checked")

    monkeypatch.setattr(partitioner.planning, "run_plan", not_reached)
    monkeypatch.setattr(partitioner.planning.recipes.estimate, "estimate", not_reached)
    from partitioner.cli import main

    picture = tmp_path / "g.html"
    monkeypatch.setattr(sys, "argv", ["partitioner", *command, "--model", "llava-1.5-7b", "--cluster", "dgx-h100",
                                      "--nodes", "1", "--gantt", str(picture)])
    with pytest.raises(SystemExit) as info:
        main()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert_input_error(info.value.code, captured.err, str(picture), "--gantt", "suffix", "html")
    assert not picture.exists()


@pytest.mark.parametrize("flags, flag, got", [
    ("--num-layers 32 --num-layers-per-virtual-pipeline-stage 0", "--num-layers-per-virtual-pipeline-stage", "got 0"),
    ("--num-layers 32 --num-layers-per-virtual-pipeline-stage -4", "--num-layers-per-virtual-pipeline-stage", "got -4"),
    ("--pipeline-model-parallel-size 0 --num-layers 32 --num-layers-per-virtual-pipeline-stage 2",
     "--pipeline-model-parallel-size", "got 0"),
])
def test_a_layers_per_virtual_stage_divisor_below_1_is_refused_naming_its_flag(flags, flag, got):
    """Tried by hand: 0 was a ZeroDivisionError (exit 3), -4 was refused as "got -8" (the vpp it implied)."""
    from partitioner.frameworks.megatron.recipe import read_megatron_args
    from partitioner.problem import ProblemError

    with pytest.raises(ProblemError) as info:
        read_megatron_args(flags + " --global-batch-size 64", source="launch.sh")
    assert info.value.path == flag and got in info.value.reason and "positive integer" in info.value.reason


@pytest.mark.parametrize("mode", ['["full"]', "{a = 1}"])
def test_a_torchtitan_ac_mode_that_is_not_a_string_is_refused_naming_it(mode):
    """Tried by hand: ``mode = ["full"]`` was hashed against the modes (internal TypeError, exit 3)."""
    from partitioner.frameworks.torchtitan.recipe import read_torchtitan_toml
    from partitioner.problem import ProblemError

    with pytest.raises(ProblemError) as info:
        read_torchtitan_toml(f"[activation_checkpoint]\nmode = {mode}\n", source="job.toml")
    assert info.value.path == "activation_checkpoint.mode" and "none, selective or full" in info.value.reason


@pytest.mark.parametrize("field, value", [("optimizer.use_distributed_optimizer", '"maybe"'),
                                          ("model.sequence_parallel", "[1]"), ("ddp.use_megatron_fsdp", "2")])
def test_a_bridge_switch_that_is_not_a_boolean_is_refused_naming_it(field, value):
    """Tried by hand: a Bridge switch of any value was read as on (``"maybe"``, ``[1]``; ``0`` too)."""
    from partitioner.frameworks.megatron.recipe import read_bridge_config
    from partitioner.problem import ProblemError

    table, key = field.split(".")
    with pytest.raises(ProblemError) as info:
        read_bridge_config(f"{table}:\n  {key}: {value}\n", source="bridge.yaml")
    assert info.value.path == field and "true or false" in info.value.reason


def test_a_bridge_switch_of_0_is_off_and_1_is_on():
    from partitioner.frameworks.megatron.recipe import read_bridge_config

    def sequence_parallel(value: str) -> object:
        return read_bridge_config(f"model:\n  tensor_model_parallel_size: 2\n  sequence_parallel: {value}\n").sequence_parallel

    assert sequence_parallel("0") is False and sequence_parallel("false") is False
    assert sequence_parallel("1") is True and sequence_parallel("true") is True


@pytest.mark.parametrize("name", ["/dev/zero", "long-word.sh"])
def test_a_recipe_file_past_its_size_is_refused_unread(tmp_path, name):
    """Tried by hand: ``--recipe /dev/zero`` read without end (12 GB in 30 s), and a 60 MB one-word script spent
    minutes in shell splitting. A recipe is read up to :data:`MAX_RECIPE_BYTES`, refused past it."""
    from partitioner.frameworks.recipe_files import MAX_RECIPE_BYTES, read_recipe_file
    from partitioner.problem import ProblemError

    path = tmp_path / name
    if name.startswith("/"):
        path = Path(name)
    else:
        path.write_text("a" * (MAX_RECIPE_BYTES + 1))
    with pytest.raises(ProblemError) as info:
        read_recipe_file(path)
    assert "KiB a recipe file may have" in info.value.reason and str(path) in str(info.value)
