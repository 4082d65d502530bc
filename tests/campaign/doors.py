"""What every door of the standing campaign (issue 35) checks, on top of ``tests/cli/test_hostile_input.py``'s helpers.

A campaign case gives one hostile input to one door -- a command of the CLI
or a function of the API -- and holds the door to its contract: exit 1 or 2
(``ProblemError``/``SolverError`` from the API) with one line on stderr
naming the file and the field or the reason; never a traceback, an internal
error (exit 3), a hang past the time limit or a wrong ``optimal``.
:func:`run_cli` and :func:`assert_input_error` are the hostile-input tests'
own; :func:`assert_refused` is their check for a door that may also answer
"no plan" (exit 1); :func:`assert_clean` for a run that may succeed.
"""
from __future__ import annotations

from tests.cli.test_hostile_input import assert_input_error, run_cli, strict_json, toy_doc, write

__all__ = ["run_cli", "assert_input_error", "assert_refused", "assert_clean", "strict_json", "toy_doc", "write", "v3_document"]


def assert_clean(code: int, err: str) -> None:
    """No traceback, no internal error: the exit is one of the CLI's own (0, 1, 2)."""
    assert "Traceback" not in err and "internal error" not in err, err[-3000:]
    assert code in (0, 1, 2), (code, err[-3000:])


def assert_refused(code: int, err: str, *words: str, codes: tuple[int, ...] = (1, 2)) -> None:
    """Exit 1 or 2 (``codes``) with exactly one non-empty line on stderr holding ``words``."""
    assert_clean(code, err)
    assert code in codes, (code, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one line, got {len(lines)}:\n{err}"
    for word in words:
        assert word in lines[0], (word, lines[0])


def v3_document(layers: int, *, seed: int = 0, gpus: int = 8, nodes: int = 1, tied: bool = True,
                memory: int = 80 * 2**30, microbatches: int = 8) -> dict:
    """A seeded format-v3 problem document of ``layers`` layers on ``nodes`` x ``gpus`` GPUs.

    Every layer offers the (dp, tp, cp) meshes of 1..gpus devices with cp in {1, 2}, an MoE layer (every
    other one) also ep 2 and ep 2 etp 2 keys; the last layer is tied to the first (an LM head and its
    embedding) when ``tied``. Times fall with the devices, weights with tp (and ep), activations with the
    devices; memory is ``memory`` bytes per GPU.
    """
    import random

    rng = random.Random(seed)
    meshes = [(d // (tp * cp), tp, cp) for d in (1, 2, 4, 8, 16, 32) if d <= gpus * nodes
              for tp in (1, 2, 4, 8) if tp <= gpus for cp in (1, 2) if d % (tp * cp) == 0]
    docs = []
    for i in range(layers):
        base, weight, act = rng.uniform(0.5, 5.0), rng.randint(2**20, 2**28), rng.randint(2**20, 2**26)
        moe = i % 2 == 1
        costs = {}
        for dp, tp, cp in meshes:
            d = dp * tp * cp
            entry = {"fwd_ms": round(base / d * rng.uniform(1.0, 1.3), 4), "bwd_ms": round(2 * base / d, 4),
                     "weight_bytes": weight // tp, "act_bytes": act // d}
            key = f"dp{dp}tp{tp}" + (f"cp{cp}" if cp > 1 else "")
            costs[key] = entry
            if moe:
                for ep, etp in ((2, 1), (2, 2)):
                    if d % (ep * etp) == 0:
                        costs[key + f"ep{ep}" + (f"etp{etp}" if etp > 1 else "")] = {
                            **entry, "weight_bytes": weight // (tp * ep * etp)}
        docs.append({"name": f"layer{i}", "module": "vision" if i < layers // 4 else "llm", "out_bytes": rng.randint(0, 2**24),
                     "costs": costs})
    if tied and layers >= 2:
        docs[-1]["tied_to"] = 0
        for entry in docs[-1]["costs"].values():
            entry["tied_weight_bytes"] = entry["weight_bytes"] // 2
    return {"version": 3, "name": f"campaign-v3-{layers}-{seed}",
            "cluster": {"nodes": nodes, "gpus_per_node": gpus, "gpu_memory_bytes": memory, "intra_node_GBps": 300.0,
                        "inter_node_GBps": 50.0},
            "training": {"microbatches": microbatches, "objective": "iteration"}, "layers": docs}
