"""A randomized adversarial campaign over the doors (issue 35): N cases from a seed, and what broke.

::

    python -m benchmarks.campaign --cases 300 --seed 0            # every door, counts on stdout
    python -m benchmarks.campaign --cases 50 --doors problem,exact --json out.json --keep cases/

Each case draws one hostile input for one door and runs it as a user would:

* ``problem`` -- a format-v3 problem (cp and ep keys, a tied head) with 0-3 hostile edits (ties to missing
  or later layers, tied bytes over the layer, huge or malformed cost keys, hostile values anywhere,
  duplicate keys, deep nesting) to ``partitioner solve --method M --time-limit L --json``;
* ``exact`` -- a small random v3 problem, memory drawn around what it needs, solved in this process by
  ``dp``, ``cpsat``, ``milp`` and ``brute`` (the reference);
* ``model`` -- a Hugging Face ``config.json`` fixture or a model preset with one hostile value at a random
  key, or a hostile workload option, to ``partitioner plan``;
* ``options`` -- ``plan`` with hostile options (``--nodes``, ``--global-batch``, ``--microbatches``,
  ``--max-stages``, ``--target``, ``--knob-solves``, ``--schedule``, ``-c`` cost options, workload options);
* ``result`` -- a result of ``plan`` or ``solve``, edited (tp 0, overlapping or missing stages, devices,
  microbatches, cp, MoE hints) or given with another model's problem, to ``export`` and ``evaluate``;
* ``api`` -- the Python API misused in this process (wrong types, negative, NaN or huge limits and options,
  unknown methods);
* ``sigint`` -- ``plan`` interrupted after a random delay;
* ``batch`` -- two sweeps writing one results file at once, then a resume.

What is counted (a case may count in several): ``traceback`` (a traceback, an internal error, exit 3, or
an exception other than ``ProblemError``/``SolverError`` from the API); ``hang`` (a command past its time
limit by more than ``--slack`` seconds beyond the start-up of a ``validate``, measured first);
``wrong_optimal`` (``optimal`` where brute force has another value or no plan, or a plan ``evaluate``
refuses); ``error_where_others_answer`` (``error`` from an exact method on a problem another method solved
or proved infeasible); ``lost_or_duplicated`` (batch lines); ``contract`` (an error of more than one line,
an exit code outside the door's, an option refused as a solver ``error`` instead of exit 2, ``export``
printing settings for a result ``evaluate`` calls invalid by rules 1-5, non-strict JSON). Timings are of this machine
under its load; the command line, seed and counts are printed so a run can be repeated.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script or module from a checkout
    sys.path.insert(0, str(ROOT))

from benchmarks.synthetic import tied_v3_document  # noqa: E402

__all__ = ["CATEGORIES", "DOORS", "Outcome", "run_campaign", "main"]

CATEGORIES = ("traceback", "hang", "wrong_optimal", "error_where_others_answer", "lost_or_duplicated", "contract")
HF = ROOT / "tests" / "fixtures" / "hf"
PRESETS = ROOT / "models"
EXACT = ("dp", "cpsat", "milp", "brute")
PROGRESS = re.compile(r"^\S.* \(\d+ s\)$")  # a piped command's progress line on stderr (cli.common.working)
MEMORY_RULE = 6  # evaluate's memory rule: export still writes a plan over it (partitioner.frameworks.export.read)
REL_TOL = 1e-6  # values of two exact methods agree to this (the solvers' objective tolerance is 1e-9)
HOSTILE = (0, -1, 1, 2, 3, 7, 2**31, 10**9, 2**63, 10**30, 0.5, -0.0, 1e308, "x", "", "8", None, True, False, [], [1],
           {}, {"a": 1})


@dataclass
class Outcome:
    """What one case found: the door, a label, the categories it broke and one line on each."""

    door: str
    label: str
    broke: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0

    def flag(self, category: str, why: str) -> None:
        self.broke.setdefault(category, why[:400])


@dataclass
class Context:
    """What every case shares: the work folder, the time limit, the measured start-up, bases made once."""

    work: Path
    limit: float
    slack: float
    startup: float = 0.0
    bases: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- running the CLI


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), "COLUMNS": "120"}


def cli(args: list[str], timeout: float, cwd: Path = ROOT) -> tuple[int | None, str, str, float]:
    """``(exit code or None on timeout, stdout, stderr, seconds)`` of ``python -m partitioner ARGS``."""
    began = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-m", "partitioner", *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, cwd=cwd, env=_env())
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, out, err, time.monotonic() - began
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - began


def _strict(text: str) -> Any:
    def refuse(token: str) -> Any:
        raise ValueError(f"non-strict JSON constant {token}")

    return json.loads(text, parse_constant=refuse)


def judge_cli(o: Outcome, ctx: Context, run: tuple[int | None, str, str, float], *, codes: tuple[int, ...] = (0, 1, 2),
              limited: bool = True, json_out: bool = False, names: str | None = None) -> None:
    """The contract every command keeps: its own exit codes, one line per error, a bounded time, strict JSON."""
    code, out, err, seconds = run
    o.seconds = seconds
    if code is None:
        o.flag("hang", f"no answer within {seconds:.0f} s")
        return
    if "Traceback" in err or "internal error" in err or code == 3:
        o.flag("traceback", err.strip().splitlines()[-1] if err.strip() else f"exit {code}")
    elif code not in codes:
        o.flag("contract", f"exit {code}: {err.strip()[-300:]}")
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("compiling", "compiled"))]
    if code == 2 and len(lines) != 1:
        o.flag("contract", f"exit 2 with {len(lines)} lines on stderr: {err.strip()[:300]}")
    if code == 2 and names and lines and names not in lines[0]:
        o.flag("contract", f"the error does not name {names}: {lines[0][:300]}")
    if json_out and code in (0, 1) and out.strip():
        try:
            _strict(out)
        except ValueError as e:
            o.flag("contract", f"stdout is not strict JSON: {e}")
    if limited and seconds - ctx.startup > ctx.limit + ctx.slack:
        o.flag("hang", f"{seconds:.1f} s under a {ctx.limit:g} s limit (start-up {ctx.startup:.1f} s)")


def measure_startup(ctx: Context) -> float:
    """Seconds of ``validate`` on the smallest example: the interpreter, the imports, a load."""
    runs = [cli(["validate", ROOT / "examples" / "vla_toy_2x4.json"], 600)[3] for _ in range(2)]
    return min(runs)


# --------------------------------------------------------------------------- door: problem files


def _hostile_key(rng: random.Random) -> str:
    return rng.choice(["dp8192tp1", "dp1tp1cp1099511627776", "dp2tp1ep4096", "dp2tp1ep4", "dp2tp1etp2", "dp2tp1cp1cp1",
                       "dp2tp1cp1", "dp2tp1cp0", "dp02tp1", "dp" + "9" * 300 + "tp1", "dp2tp2ep1etp2", "dp1tp2/none",
                       "dp1tp1/", "DP1TP1", "dp1 tp1", "dp-1tp1", "dp1.5tp1", ""])


def _leaves(node: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _leaves(v, (*path, k))] or [path]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _leaves(v, (*path, i))] or [path]
    return [path]


def _set_path(doc: Any, path: tuple, value: Any) -> None:
    for part in path[:-1]:
        doc = doc[part]
    if path:
        doc[path[-1]] = value


def _edit_problem(rng: random.Random, doc: dict) -> tuple[dict | str, str]:
    """0-3 hostile edits of a problem document: the document (or its text) and what was done."""
    done = []
    layers = doc["layers"]
    for _ in range(rng.randint(0, 3)):
        k = rng.randrange(len(layers))
        kind = rng.choice(["tied_to", "tied_bytes", "key", "leaf", "leaf", "stages", "training"])
        if kind == "tied_to":
            value = rng.choice([k, k + 1, len(layers) + 5, -1, 0, "0", True, None, 2**70])
            layers[k]["tied_to"] = value
        elif kind == "tied_bytes":
            entry = rng.choice(list(layers[k]["costs"].values()))
            value = rng.choice([entry["weight_bytes"] + 1, -1, 2**50 + 1, entry["weight_bytes"], "x"])
            entry["tied_weight_bytes"] = value
        elif kind == "key":
            entry = copy.deepcopy(rng.choice(list(layers[k]["costs"].values())))
            entry.pop("tied_weight_bytes", None)
            value = _hostile_key(rng)
            layers[k]["costs"][value] = entry
        elif kind == "stages":
            value = rng.choice([0, -1, {"min": 3, "max": 2}, {"min": 1, "max": 10**9}, "all", 10**6])
            doc["stages"] = value
        elif kind == "training":
            value = rng.choice([{"microbatches": 0}, {"microbatches": 10**6}, {"schedule": "interleaved"},
                                {"schedule": "interleaved", "virtual_stages": 10**5}, {"objective": "x"}])
            doc.setdefault("training", {}).update(value)
        else:
            path = rng.choice(_leaves(doc))
            value = rng.choice(HOSTILE)
            _set_path(doc, path, value)
            kind = "/".join(map(str, path[-3:]))
        done.append(f"{kind}={value!r}"[:60])
    text: dict | str = doc
    roll = rng.random()
    if roll < 0.05:
        text = json.dumps(doc).replace('"layers":', '"layers": [], "layers":', 1)
        done.append("duplicate key")
    elif roll < 0.08:
        text = json.dumps({**doc, "meta": {"x": "@"}}).replace('"@"', "[" * 200 + "]" * 200)
        done.append("deep meta")
    return text, ", ".join(done) or "unedited"


def door_problem(rng: random.Random, ctx: Context) -> Outcome:
    doc = tied_v3_document(rng.choice([3, 4, 6, 12, 24]), rng.choice([1, 2]), rng.choice([4, 8]), seed=rng.randrange(10**6),
                           microbatches=rng.choice([1, 4, 8]))
    edited, what = _edit_problem(rng, doc)
    method = rng.choice(["dp", "dp", "greedy", "cpsat", "milp", "brute", "uniform", "balanced"])
    path = ctx.work / f"problem-{rng.randrange(10**9)}.json"
    path.write_text(edited if isinstance(edited, str) else json.dumps(edited))
    o = Outcome("problem", f"{method}: {what}")
    run = cli(["solve", path, "--method", method, "--time-limit", ctx.limit, "--json"], timeout=_hard(ctx))
    judge_cli(o, ctx, run, json_out=True, names=str(path))
    return o


def _hard(ctx: Context) -> float:
    return 10 * ctx.limit + ctx.startup + 120


# --------------------------------------------------------------------------- door: exact methods against brute force


def _small_problem(rng: random.Random) -> Any:
    from partitioner.problem import Problem

    gpus = rng.choice([2, 4, 8])
    doc = tied_v3_document(rng.randint(2, 5), 1, gpus, seed=rng.randrange(10**6), microbatches=rng.choice([1, 2, 4, 8]),
                           headroom=rng.choice([0.6, 0.9, 1.0, 1.1, 1.5, 3.0]))
    if rng.random() < 0.3:  # no tie
        doc["layers"][-1].pop("tied_to", None)
        for entry in doc["layers"][-1]["costs"].values():
            entry.pop("tied_weight_bytes", None)
    doc["training"]["objective"] = rng.choice(["iteration", "bottleneck"])
    return Problem.from_dict(doc)


def door_exact(rng: random.Random, ctx: Context) -> Outcome:
    from partitioner import evaluate, solve

    problem = _small_problem(rng)
    o = Outcome("exact", f"{problem.name} ({problem.num_layers} layers, {problem.num_devices} GPUs, {problem.objective})")
    results = {}
    began = time.monotonic()
    for method in EXACT:
        try:
            results[method] = solve(problem, method, time_limit=max(ctx.limit, 20.0))
        except Exception as e:  # noqa: BLE001 - a valid problem must not raise
            o.flag("traceback", f"{method}: {type(e).__name__}: {e}")
    o.seconds = time.monotonic() - began
    for method, r in results.items():
        try:
            json.dumps(r.to_dict(), allow_nan=False)
        except ValueError as e:
            o.flag("contract", f"{method}: {e}")
        if r.plan is not None:
            try:
                ev = evaluate(problem, r.plan, r.objective)
            except Exception as e:  # noqa: BLE001 - the plan a solver returns must be valid
                o.flag("wrong_optimal", f"{method}'s plan is refused by evaluate: {e}")
                continue
            if r.value is not None and not math.isclose(ev.value, r.value, rel_tol=1e-9):
                o.flag("wrong_optimal", f"{method} says {r.value} but evaluate {ev.value}")
    brute = results.get("brute")
    if brute is not None and brute.status in ("optimal", "infeasible"):
        for method, r in results.items():
            if r.status != "optimal":
                continue
            if brute.status == "infeasible":
                o.flag("wrong_optimal", f"{method} optimal {r.value} where brute proves infeasible")
            elif not math.isclose(r.value, brute.value, rel_tol=REL_TOL):
                o.flag("wrong_optimal", f"{method} optimal {r.value}, brute {brute.value}")
    answered = [m for m, r in results.items() if r.plan is not None or r.status == "infeasible"]
    for method, r in results.items():
        if r.status == "error" and answered:
            o.flag("error_where_others_answer", f"{method}: error ({(r.message or '')[:200]}) where "
                                                f"{answered[0]} says {results[answered[0]].status}")
    return o


# --------------------------------------------------------------------------- door: model files and workload options


def _fixtures() -> list[Path]:
    return sorted(p for p in HF.glob("*/config.json"))


def door_model(rng: random.Random, ctx: Context) -> Outcome:
    import yaml

    workload: list[str] = []
    if rng.random() < 0.5:
        source = rng.choice(_fixtures())
        doc = json.loads(source.read_text())
        path = ctx.work / f"model-{rng.randrange(10**9)}" / source.parent.name / "config.json"
        path.parent.mkdir(parents=True)
    else:
        source = rng.choice(sorted(PRESETS.glob("*.yaml")))
        doc = yaml.safe_load(source.read_text())
        path = ctx.work / f"model-{rng.randrange(10**9)}-{source.name}"
    leaf = rng.choice(_leaves(doc))
    value = rng.choice(HOSTILE)
    what = f"{source.parent.name if source.name == 'config.json' else source.stem}: {'.'.join(map(str, leaf))}={value!r}"
    if rng.random() < 0.25:
        flag = rng.choice(["--images", "--frames", "--tiles", "--fps", "--image-size", "--text-tokens", "--mtp-layers"])
        workload = [flag, str(rng.choice([0, -1, 1, 3, 64, 10**6, 10**30, "inf", "nan", "0.5", "x"]))]
        what += f", {' '.join(workload)}"
    else:
        _set_path(doc, leaf, value)
    path.write_text(json.dumps(doc) if path.suffix == ".json" else yaml.safe_dump(doc))
    o = Outcome("model", what[:200])
    args = ["plan", "--model", path, "--cluster", rng.choice(["dgx-h100", "gb200-nvl72"]), "--nodes", rng.choice([1, 2]),
            "--global-batch", rng.choice([8, 64]), "--time-limit", ctx.limit, *workload]
    judge_cli(o, ctx, cli(args, timeout=_hard(ctx)))
    return o


# --------------------------------------------------------------------------- door: plan options


_OPTIONS: dict[str, list[Any]] = {
    "--nodes": [0, -1, 1, 2, 1024, 1025, 10**30],
    "--global-batch": [0, 1, 7, 97, 1024, 2**24, 2**24 + 1, 10**9, 10**30],
    "--microbatches": ["auto", 0, 1, 3, 7, 10**5, 10**9, "x", "-1"],
    "--max-stages": [0, 1, 2, 64, 10**9],
    "--target": ["any", "megatron", "torchtitan", "deepspeed", "fsdp", ""],
    "--knob-solves": ["fast", "all", "some"],
    "--schedule": ["auto", "1f1b", "zb-h1", "gpipe", "interleaved", "x"],
    "--virtual-stages": [1, 2, 3, 10**6],
    "--objective": ["iteration", "bottleneck", "x"],
    "--method": ["dp", "greedy", "cpsat", "milp", "brute", "x"],
    "-c": ["variants=all", "recompute=x", "zero1=2", "cp=0", "cp=3", "cp=1024", "ep=0", "ep=7", "etp=0",
           "cp_algorithm=x", "sequence_parallel=maybe", "freeze=nope", "train=[1]", "x=1", "flash=", "text_tokens=-1"],
    "--images": [0, 1, 2, 10**6], "--frames": [0, 1, 3, 16, 10**6], "--fps": ["inf", "nan", "0", "2", "1e-9"],
    "--tiles": [0, 1, 4, 10**6], "--image-size": [0, 28, 448, 10**6], "--text-tokens": [0, 1, 10**7],
}
_MODELS = ("llava-1.5-7b", "qwen2-vl-7b-video", "qwen3-vl-30b-a3b", "pi0", "openvla-7b", "deepseek-v3")


def door_options(rng: random.Random, ctx: Context) -> Outcome:
    args: list[Any] = ["plan", "--model", rng.choice(_MODELS), "--cluster", rng.choice(["dgx-h100", "dgx-a100-80g"]),
                       "--time-limit", ctx.limit]
    chosen = {"--nodes": 1, "--global-batch": 64}
    for name in rng.sample(sorted(_OPTIONS), rng.randint(1, 3)):
        chosen[name] = rng.choice(_OPTIONS[name])
    for name, value in chosen.items():
        args += [name, value]
    o = Outcome("options", " ".join(map(str, args[1:])))
    judge_cli(o, ctx, cli(args, timeout=_hard(ctx) + 60))
    return o


# --------------------------------------------------------------------------- door: results given to export and evaluate


def _result_bases(ctx: Context) -> list[tuple[Path, Path]]:
    """(result, its problem) pairs made once: a `plan` of a VLM, a MoE plan, a `solve` of a v3 example."""
    if "results" in ctx.bases:
        return ctx.bases["results"]
    pairs = []
    for name, args in (("llava", ["--model", "llava-1.5-7b", "--nodes", "2", "--global-batch", "64"]),
                       ("moe", ["--model", "qwen3-vl-30b-a3b", "--nodes", "2", "--global-batch", "64"])):
        problem, result = ctx.work / f"base-{name}.problem.json", ctx.work / f"base-{name}.json"
        code, out, err, _ = cli(["plan", *args, "--cluster", "dgx-h100", "--time-limit", "60", "--json",
                                 "--save-problem", problem], timeout=900)
        if code == 0:
            result.write_text(out)
            pairs.append((result, problem))
    for example in ("v3_cp_colocated.json", "vla_toy_2x4.json"):
        result = ctx.work / f"base-{example}"
        code, out, _, _ = cli(["solve", ROOT / "examples" / example, "--json"], timeout=600)
        if code == 0:
            result.write_text(out)
            pairs.append((result, ROOT / "examples" / example))
    ctx.bases["results"] = pairs
    return pairs


def _edit_result(rng: random.Random, doc: dict) -> str:
    """One hostile edit of a result document (its plan's stages, its batch, its hints): what was done."""
    plan = doc.get("plan") if isinstance(doc.get("plan"), dict) else doc
    stages = plan.get("stages") or []
    if not stages:
        return "no stages"
    s = rng.randrange(len(stages))
    stage = stages[s]
    configs = stage.get("configs") if isinstance(stage.get("configs"), list) and stage["configs"] else [stage]
    config = rng.choice(configs)
    kind = rng.choice(["tp0", "dp", "devices", "overlap", "gap", "first", "cp", "ep", "microbatches", "hint_topk",
                       "leaf", "drop_stage", "schedule", "device_ids"])
    if kind == "tp0":
        config["tp"] = 0
    elif kind == "dp":
        config["dp"] = rng.choice([0, -1, config.get("dp", 1) * 2, 10**9])
    elif kind == "devices":
        stage["devices"] = rng.choice([0, stage.get("devices", 1) + 1, stage.get("devices", 1) * 2, 10**6])
    elif kind == "overlap" and len(stages) > 1:
        stages[min(s + 1, len(stages) - 1)]["first_layer"] = stage.get("first_layer", 0)
    elif kind == "gap":
        stage["last_layer"] = stage.get("last_layer", 0) - 1
    elif kind == "first":
        stage["first_layer"] = rng.choice([-1, 10**6])
    elif kind == "cp":
        config["cp"] = rng.choice([2, 64, 4096])
    elif kind == "ep":
        config["ep"] = rng.choice([3, 256, 10**6])
    elif kind == "microbatches":
        doc["microbatches"] = rng.choice([0, -1, 3, 10**9])
    elif kind == "hint_topk":
        moe = (doc.get("export_hints") or {}).get("moe")
        if not isinstance(moe, dict):
            return "no moe hints"
        moe["top_k"] = (moe.get("experts") or 8) + 1
    elif kind == "drop_stage" and len(stages) > 1:
        stages.pop(s)
    elif kind == "schedule":
        doc["schedule"] = rng.choice([{"schedule": "interleaved", "virtual_stages": 0}, {"schedule": "x"}, "1f1b"])
    elif kind == "device_ids":
        stage["device_ids"] = rng.choice([[], [0] * stage.get("devices", 1), [10**6], "0"])
    else:
        path = rng.choice(_leaves(doc))
        value = rng.choice(HOSTILE)
        _set_path(doc, path, value)
        return f"{'/'.join(map(str, path[-3:]))}={value!r}"[:80]
    return kind


def _refused_rule(evaluate_json: str) -> int | None:
    """The rule ``evaluate --json`` says a plan breaks (None: no such report, e.g. a malformed file, exit 2)."""
    try:
        doc = json.loads(evaluate_json)
    except ValueError:
        return None
    rule = doc.get("rule") if isinstance(doc, dict) else None
    return rule if isinstance(rule, int) else None


def door_result(rng: random.Random, ctx: Context) -> Outcome:
    pairs = _result_bases(ctx)
    if not pairs:
        o = Outcome("result", "no base result could be made")
        o.flag("contract", "plan/solve --json gave no base result")
        return o
    result, problem = rng.choice(pairs)
    doc = json.loads(result.read_text())
    what = _edit_result(rng, doc) if rng.random() < 0.85 else "unedited"
    foreign = rng.random() < 0.25
    if foreign:  # another model's problem
        others = [p for r, p in pairs if p != problem]
        if others:
            problem = rng.choice(others)
            what += f", with the problem of {problem.name}"
    path = ctx.work / f"result-{rng.randrange(10**9)}.json"
    path.write_text(json.dumps(doc))
    o = Outcome("result", f"{result.name}: {what}")
    ev = cli(["evaluate", problem, path, "--json"], timeout=_hard(ctx))
    judge_cli(o, ctx, ev, limited=False, json_out=True)
    target = rng.choice(["megatron", "torchtitan", "deepspeed"])
    with_problem = ["--problem", problem] if (foreign or rng.random() < 0.5 or "export_hints" not in doc) else []
    ex = cli(["export", path, "--to", target, *with_problem], timeout=_hard(ctx))
    judge_cli(o, ctx, ex, limited=False)
    if with_problem and ev[0] in (1, 2) and ex[0] == 0 and _refused_rule(ev[1]) != MEMORY_RULE:
        o.flag("contract", f"export to {target} printed settings for a result evaluate refuses: "
                           f"{(ev[2].strip().splitlines() or [''])[-1][:200]}")
    return o


# --------------------------------------------------------------------------- door: the Python API


def _api_calls(rng: random.Random) -> tuple[str, Callable[[], Any]]:
    from partitioner import evaluate, load_problem, plan_model, solve

    toy = load_problem(ROOT / "examples" / "vla_toy_2x4.json")
    weird = [None, -1, 0, float("nan"), float("inf"), -float("inf"), "5", True, 1e308, 10**30, [], {}, object()]
    options = {"dp": ["memory_budget_gb", "threads", "placement"], "cpsat": ["num_workers", "resolution", "hint"],
               "milp": ["threads", "backend"], "brute": ["max_combinations"], "greedy": ["x"]}
    kind = rng.choice(["method", "time_limit", "seed", "options", "problem", "plan", "plan_model"])
    if kind == "method":
        method = rng.choice(["", "DP", "nope", None, 5, "dp "])
        return f"solve(method={method!r})", lambda: solve(toy, method)  # type: ignore[arg-type]
    if kind == "time_limit":
        value = rng.choice(weird)
        return f"solve(time_limit={value!r})", lambda: solve(toy, "dp", time_limit=value)  # type: ignore[arg-type]
    if kind == "seed":
        value = rng.choice(weird)
        return f"solve(seed={value!r})", lambda: solve(toy, "cpsat", seed=value)  # type: ignore[arg-type]
    if kind == "options":
        method = rng.choice(sorted(options))
        opts = {rng.choice(options[method]): rng.choice([*weird, 1, 2])}
        return f"solve({method}, options={opts!r})", lambda: solve(toy, method, options=opts, time_limit=10)
    if kind == "problem":
        value = rng.choice([None, 42, "nope.json", {"version": 3}, [], toy.to_dict() | {"layers": []}])
        return f"solve({value!r:.40})", lambda: solve(value)  # type: ignore[arg-type]
    if kind == "plan":
        value = rng.choice([None, 3.5, {}, {"stages": []}, {"stages": [{"first": 0, "last": 99, "dp": 1, "tp": 1}]}, [1]])
        return f"evaluate(plan={value!r:.60})", lambda: evaluate(toy, value)  # type: ignore[arg-type]
    name = rng.choice(["nodes", "global_batch", "microbatches", "max_stages", "time_limit", "target", "knob_solves",
                       "options", "method", "objective", "schedule"])
    value = rng.choice([*weird, "x", {"cp": 0}, {"zero": 1}])
    kwargs: dict[str, Any] = {"nodes": 1, "global_batch": 8, "method": "greedy", "time_limit": 10, name: value}
    return f"plan_model({name}={value!r:.40})", lambda: plan_model("llava-1.5-7b", "dgx-h100", **kwargs)


def judge_api_status(o: Outcome, status: str | None, message: str) -> None:
    """Flag ``contract`` when an API call answered an option's value with a solver ``error`` (not exit 2).

    A problem over a method's own bound (brute's ``max_combinations``: issue 35's "oracle's own bound") is that
    method's answer for the problem, as CP-SAT's UNKNOWN at a limit: the option's value itself was accepted.
    """
    over_bound = re.search(r"exceed the limit of [\d,]+ \(option \w+\)", message) is not None
    if status == "error" and ("option" in message or "must be" in message) and not over_bound:
        o.flag("contract", f"an option refused as a solver error, not ProblemError/SolverError: {message[:200]}")


def door_api(rng: random.Random, ctx: Context) -> Outcome:
    from partitioner import ProblemError, SolverError

    label, call = _api_calls(rng)
    o = Outcome("api", label)
    began = time.monotonic()
    try:
        result = call()
    except (ProblemError, SolverError):
        result = None
    except Exception as e:  # noqa: BLE001 - what the campaign counts
        o.flag("traceback", f"{type(e).__name__}: {e}")
        result = None
    o.seconds = time.monotonic() - began
    judge_api_status(o, getattr(result, "status", None), getattr(result, "message", "") or "")
    if o.seconds > ctx.limit + ctx.slack + 10:
        o.flag("hang", f"{o.seconds:.1f} s")
    return o


# --------------------------------------------------------------------------- door: interrupts


def door_sigint(rng: random.Random, ctx: Context) -> Outcome:
    delay = rng.uniform(0.1, 8.0)
    args = [sys.executable, "-m", "partitioner", "plan", "--model", rng.choice(_MODELS[:3]), "--cluster", "dgx-h100",
            "--nodes", "1", "--global-batch", "64", "--time-limit", str(ctx.limit)]
    o = Outcome("sigint", f"SIGINT after {delay:.2f} s")
    began = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())
    time.sleep(delay)
    sent = proc.poll() is None
    if sent:
        proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        o.flag("hang", "no exit within 120 s of the interrupt")
        return o
    o.seconds = time.monotonic() - began
    lines = [line for line in err.splitlines() if line.strip() and not PROGRESS.match(line)]
    if "Traceback" in err:
        o.flag("traceback", err.strip().splitlines()[-1])
    elif sent and proc.returncode != 0 and (proc.returncode != 130 or lines != ["interrupted"]):
        o.flag("contract", f"exit {proc.returncode}, stderr {err.strip()[-200:]!r}")
    return o


# --------------------------------------------------------------------------- door: two sweeps on one results file


def door_batch(rng: random.Random, ctx: Context) -> Outcome:
    examples = ["vla_toy_2x4.json", "rebalance_4gpu.json", "colocated_1node.json", "v3_cp_colocated.json"]
    problems = [str(ROOT / "examples" / e) for e in rng.sample(examples, rng.randint(2, 4))]
    methods = rng.sample(["greedy", "uniform", "balanced", "dp"], rng.randint(1, 3))
    folder = ctx.work / f"batch-{rng.randrange(10**9)}"
    folder.mkdir()
    sweep, out = folder / "sweep.json", folder / "out.jsonl"
    sweep.write_text(json.dumps({"problems": problems, "methods": methods, "time_limit": ctx.limit}))
    o = Outcome("batch", f"{len(problems)} problems x {methods}, two sweeps at once")
    args = [sys.executable, "-m", "partitioner", "batch", str(sweep), "--out", str(out), "--workers", "1", "--no-progress"]
    began = time.monotonic()
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env())]
    time.sleep(rng.uniform(0.0, 3.0))
    procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env()))
    for proc in procs:
        _, err = proc.communicate(timeout=_hard(ctx) * 4)
        if "Traceback" in err or proc.returncode == 3:
            o.flag("traceback", err.strip().splitlines()[-1] if err.strip() else "exit 3")
        elif proc.returncode == 2 and "another running sweep" not in err:
            o.flag("contract", f"exit 2: {err.strip()[:200]}")
        elif proc.returncode not in (0, 2):
            o.flag("contract", f"exit {proc.returncode}: {err.strip()[:200]}")
    cli(["batch", sweep, "--out", out, "--workers", "1", "--no-progress"], timeout=_hard(ctx) * 4)
    o.seconds = time.monotonic() - began
    keys = [_strict(line)["key"] for line in out.read_text().splitlines() if line.strip()] if out.exists() else []
    expected = len(problems) * len(methods)
    if len(keys) != len(set(keys)):
        o.flag("lost_or_duplicated", f"{len(keys) - len(set(keys))} duplicated lines")
    if len(set(keys)) != expected:
        o.flag("lost_or_duplicated", f"{len(set(keys))} of {expected} jobs recorded")
    return o


DOORS: dict[str, tuple[Callable[[random.Random, Context], Outcome], float]] = {
    # door: (case, weight in the mix)
    "problem": (door_problem, 0.22),
    "exact": (door_exact, 0.20),
    "model": (door_model, 0.15),
    "options": (door_options, 0.12),
    "result": (door_result, 0.15),
    "api": (door_api, 0.10),
    "sigint": (door_sigint, 0.03),
    "batch": (door_batch, 0.03),
}


# --------------------------------------------------------------------------- the campaign


def run_campaign(cases: int, seed: int, doors: list[str], limit: float, slack: float, work: Path,
                 progress: Callable[[int, Outcome], None] | None = None) -> list[Outcome]:
    """Run ``cases`` cases drawn from ``doors`` (by their weights) with seed ``seed``; every outcome in order."""
    ctx = Context(work, limit, slack)
    ctx.startup = measure_startup(ctx)
    weights = [DOORS[d][1] for d in doors]
    outcomes = []
    for i in range(cases):
        rng = random.Random(f"{seed}:{i}")
        door = rng.choices(doors, weights)[0]
        try:
            outcome = DOORS[door][0](rng, ctx)
        except Exception as e:  # noqa: BLE001 - a bug of the campaign itself: counted, never hidden
            outcome = Outcome(door, f"campaign error: {type(e).__name__}: {e}")
            outcome.flag("contract", f"the case itself failed: {type(e).__name__}: {e}")
        outcomes.append(outcome)
        if progress is not None:
            progress(i, outcome)
    return outcomes


def summary(outcomes: list[Outcome], doors: list[str]) -> dict[str, Any]:
    by_door = {d: Counter() for d in doors}
    for o in outcomes:
        by_door[o.door]["cases"] += 1
        for category in o.broke:
            by_door[o.door][category] += 1
    total = Counter({c: sum(by_door[d][c] for d in doors) for c in ("cases", *CATEGORIES)})
    return {"total": dict(total), "by_door": {d: dict(c) for d, c in by_door.items()},
            "failures": [{"door": o.door, "case": o.label, "broke": o.broke} for o in outcomes if o.broke]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--doors", default=",".join(DOORS), help=f"comma-separated, of {', '.join(DOORS)}")
    parser.add_argument("--time-limit", type=float, default=5.0, help="the limit every solve and plan gets (s)")
    parser.add_argument("--slack", type=float, default=10.0,
                        help="seconds past the limit (beyond the measured start-up) before a run counts as a hang")
    parser.add_argument("--json", type=Path, help="write the summary and every failure here")
    parser.add_argument("--keep", type=Path, help="keep the cases' files in this folder")
    args = parser.parse_args(argv)
    doors = [d for d in args.doors.split(",") if d]
    unknown = [d for d in doors if d not in DOORS]
    if unknown:
        parser.error(f"unknown doors {unknown} (doors: {', '.join(DOORS)})")
    work = args.keep or Path(tempfile.mkdtemp(prefix="campaign-"))
    work.mkdir(parents=True, exist_ok=True)

    def progress(i: int, o: Outcome) -> None:
        mark = ", ".join(o.broke) or "ok"
        print(f"[{i + 1}/{args.cases}] {o.door:8s} {o.seconds:6.1f} s  {mark:12s} {o.label[:110]}", file=sys.stderr, flush=True)

    began = time.monotonic()
    outcomes = run_campaign(args.cases, args.seed, doors, args.time_limit, args.slack, work, progress)
    doc = summary(outcomes, doors)
    doc["run"] = {"cases": args.cases, "seed": args.seed, "doors": doors, "time_limit": args.time_limit,
                  "slack": args.slack, "seconds": round(time.monotonic() - began, 1), "load": os.getloadavg()}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    print(f"campaign: {args.cases} cases, seed {args.seed}, time limit {args.time_limit:g} s, "
          f"{doc['run']['seconds']:.0f} s, load {doc['run']['load'][0]:.1f}")
    print(f"{'door':10s} {'cases':>5s} " + " ".join(f"{c:>10.10s}" for c in CATEGORIES))
    for door in [*doors, "total"]:
        row = doc["total"] if door == "total" else doc["by_door"][door]
        print(f"{door:10s} {row.get('cases', 0):5d} " + " ".join(f"{row.get(c, 0):10d}" for c in CATEGORIES))
    for failure in doc["failures"][:40]:
        for category, why in failure["broke"].items():
            print(f"  {failure['door']}/{category}: {failure['case'][:100]} -- {why[:200]}")
    return 1 if doc["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
