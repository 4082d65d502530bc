"""Each framework's rules live in its home (``partitioner/frameworks/<name>/``) and nowhere else.

The planner (``plan --target``) and the exporters read the same
``RULES`` records; a rule table stated again anywhere else in the package
-- a mapping keyed by framework names, a framework's schedule set, its
bytes-per-parameter counts per ZeRO stage -- fails
:func:`test_no_rule_is_stated_outside_its_home`, found by reading the
source (``ast``), so a restated table is caught even where no test runs it.
Each home's FP8 recipes must also be those the cost model's recipe table
says the framework runs (:data:`partitioner.costs.compute.fp8.RECIPES`).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import get_args

import pytest

import partitioner
from partitioner.costs import PARAM_MEMORY
from partitioner.frameworks import RULES, TARGETS, FrameworkName, rules_of, target_memory, target_options
from partitioner.planning.targets import rules as planner_rules
from partitioner.problem import ProblemError

PACKAGE = Path(partitioner.__file__).resolve().parent
HOMES = PACKAGE / "frameworks"


def test_the_registry_gathers_the_homes():
    assert TARGETS == tuple(RULES) == get_args(FrameworkName)
    for name, rules in RULES.items():
        home = __import__(f"partitioner.frameworks.{name}", fromlist=["RULES"])
        assert rules is home.RULES and rules.name == name


def test_the_planner_reads_the_homes_rules():
    """``plan --target``'s rules are the very records of the homes, not copies."""
    assert planner_rules.RULES is RULES
    for name in TARGETS:
        assert planner_rules.rules_for(name) is RULES[name]
    assert planner_rules.rules_for("any") is None
    assert planner_rules.TARGETS == ("any", *TARGETS)


@pytest.mark.parametrize("target", TARGETS)
def test_targets_pick_a_count_per_stage(target):
    for zero, name in RULES[target].memory.items():
        assert name in PARAM_MEMORY
        assert target_memory(target, zero).name == name
        assert target_options(target, zero).memory_count == name
    with pytest.raises(ProblemError):
        target_memory(target, 7)
    with pytest.raises(ProblemError, match="unknown target"):
        target_memory("colossalai")
    with pytest.raises(ProblemError, match="--to"):
        rules_of("colossalai", "--to")


# --------------------------------------------------------------------------- rule tables outside the homes


def _strings(node: ast.AST) -> list[str] | None:
    """The strings of a literal tuple, list or set of string constants, else None."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [e.value for e in node.elts]  # type: ignore[attr-defined]
    return None


def _dict_items(node: ast.AST) -> list[tuple[object, object]] | None:
    """``(key, value)`` constants of a literal dict (None entries for non-constant parts), else None."""
    if isinstance(node, ast.Dict):
        return [(k.value if isinstance(k, ast.Constant) else None, v.value if isinstance(v, ast.Constant) else None)
                for k, v in zip(node.keys, node.values)]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and node.keywords:
        return [(k.arg, None) for k in node.keywords]
    return None


def rule_tables(source: str, home: str | None) -> list[str]:
    """What in ``source`` restates a framework's rules, for a module of framework ``home`` (None: of no home).

    * a literal mapping keyed by two or more framework names (a per-framework table);
    * a literal set of strings equal to a framework's schedules or FP8 recipes (two or more), outside its home;
    * a literal mapping from ZeRO stages to bytes-per-parameter counts equal to a framework's, outside its home.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        items = _dict_items(node)
        if items is not None:
            names = [k for k, _ in items if k in RULES]
            if len(names) >= 2:
                found.append(f"line {node.lineno}: a table keyed by frameworks {names}")
            for name, rules in RULES.items():
                if name != home and items and dict(items) == dict(rules.memory):  # type: ignore[arg-type]
                    found.append(f"line {node.lineno}: {name}'s bytes-per-parameter counts")
                if name != home and len(rules.schedules) >= 2 and {k for k, _ in items} == set(rules.schedules):
                    found.append(f"line {node.lineno}: {name}'s schedules (as keys)")
        strings = _strings(node)
        if strings is not None:
            for name, rules in RULES.items():
                for what, values in (("schedules", rules.schedules), ("FP8 recipes", rules.fp8_recipes)):
                    if name != home and len(values) >= 2 and set(strings) == set(values):
                        found.append(f"line {node.lineno}: {name}'s {what} {strings}")
    return found


def _home_of(path: Path) -> str | None:
    parts = path.relative_to(PACKAGE).parts
    return parts[1] if len(parts) > 2 and parts[0] == "frameworks" and parts[1] in RULES else None


def test_the_scan_finds_a_restated_rule():
    assert rule_tables('S = {"megatron": ("1f1b",), "deepspeed": ("1f1b",)}', None)
    assert rule_tables('S = dict(megatron=1, torchtitan=2)', None)
    assert rule_tables('RUNS = ("1f1b", "interleaved")', None)  # Megatron-LM's schedules
    assert rule_tables('RUNS = ("1f1b", "interleaved")', "torchtitan")
    assert not rule_tables('RUNS = ("1f1b", "interleaved")', "megatron")  # in its own home
    assert rule_tables('M = {0: "torchtitan-ddp", 1: "fsdp2-keep-gathered", 3: "fsdp2"}', "megatron")
    assert rule_tables('N = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}', "deepspeed")
    assert not rule_tables('X = ("1f1b", "zb-h1", "gpipe")', None)
    assert rule_tables('R = ("rowwise", "mxfp8")', "megatron")  # torchtitan's FP8 recipes


def test_no_rule_is_stated_outside_its_home():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found = rule_tables(path.read_text(), _home_of(path))
        if found:
            offenders[str(path.relative_to(PACKAGE))] = found
    assert not offenders, f"framework rules stated outside their home (partitioner/frameworks/<name>/): {offenders}"


def test_the_fp8_recipes_are_those_the_recipe_table_names_per_framework():
    from partitioner.costs.compute.fp8 import RECIPES

    assert set(RULES["megatron"].fp8_recipes) == {n for n, r in RECIPES.items() if r.megatron is not None}
    assert set(RULES["torchtitan"].fp8_recipes) == {n for n, r in RECIPES.items() if r.torchtitan is not None}
    assert RULES["deepspeed"].fp8_recipes == ()
