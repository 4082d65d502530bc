"""The problem builder wires format v3's axes in: tied weights, context and expert parallelism.

DESIGN.md, "Cost model v3 wiring": a tied LM head names the embedding
(``tied_to``) and carries its copy's bytes; cp keys only for long
sequences (``cp_min_tokens``); ep keys on the layers of a MoE module.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from partitioner.costs import build_problem
from partitioner.plan import Plan, Stage, evaluate
from partitioner.problem import Problem

HF = Path(__file__).resolve().parents[1] / "fixtures" / "hf"
PALIGEMMA = str(HF / "paligemma-3b-pt-224" / "config.json")


def _untied(problem: Problem) -> Problem:
    """The same problem without the tie (a pipeline that keeps both copies everywhere)."""
    doc = problem.to_dict()
    for layer in doc["layers"]:
        layer.pop("tied_to", None)
        for entry in layer["costs"].values():
            entry.pop("tied_weight_bytes", None)
    return Problem.from_dict(doc)


# --------------------------------------------------------------------------- tied weights


def test_a_tied_head_names_the_embedding_and_its_copy():
    problem = build_problem(PALIGEMMA, "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    assert problem.version == 3
    names = [layer.name for layer in problem.layers]
    head, embed = names.index("llm.head"), names.index("llm.embed")
    assert problem.layers[head].tied_to == embed
    assert problem.ties == ((embed, head),)
    vocab, hidden = 257216, 2048  # PaliGemma-3B's Gemma: the tied matrix
    for layout, cost in problem.layers[head].costs.items():
        assert 0 < cost.tied_weight_bytes <= cost.weight_bytes
        # the copy's bf16 weight, fp32 gradient and (sharded) optimizer states / tp, as the rest of the head
        copy = vocab * hidden * 18.0 / layout.tp
        assert cost.tied_weight_bytes == pytest.approx(copy, rel=1e-6)
    for k, layer in enumerate(problem.layers):
        if k != head:
            assert layer.tied_to is None
            assert all(c.tied_weight_bytes == 0 for c in layer.costs.values())


def test_a_one_stage_plan_holds_a_tied_head_once():
    problem = build_problem(PALIGEMMA, "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    untied = _untied(problem)
    head = [layer.name for layer in problem.layers].index("llm.head")
    plan = Plan((Stage(0, len(problem.layers) - 1, 8, 1, 8),))
    tied_memory = evaluate(problem, plan).stages[0].weight_bytes
    untied_memory = evaluate(untied, plan).stages[0].weight_bytes
    copy = problem.layers[head].costs[next(c for c in problem.layers[head].costs if c.tp == 8)].tied_weight_bytes
    assert untied_memory - tied_memory == copy > 0
    # split so that the head's stage lacks the embedding: that stage keeps the whole copy
    two = Plan((Stage(0, head - 1, 4, 1, 4), Stage(head, head, 4, 1, 4)))
    assert evaluate(problem, two).stages[1].weight_bytes == evaluate(untied, two).stages[1].weight_bytes


def test_untied_models_stay_in_their_format():
    problem = build_problem("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=8)
    assert problem.version == 1 and problem.ties == ()
