"""Plans as training-launcher settings: Megatron-LM, torchtitan, DeepSpeed.

Each exporter maps a plan's stages onto what the framework can express and
says plainly what it cannot (frameworks give every pipeline stage one
(dp, tp) layout; a plan whose stages differ needs per-module meshes).

* **Megatron-LM**: ``--pipeline-model-parallel-layout`` with the TP/PP
  flags when the language-model stages share one layout. The layout string
  lists the stages separated by ``|``: ``E`` embedding, ``t`` decoder
  layer, ``L`` loss, ``x*N`` repeats a symbol and ``(...)*N`` a group,
  commas are cosmetic, empty stages are allowed [1]_. When the vision part
  has its own stages, the encoder grid is given twice: Megatron Core's
  ``--encoder-pipeline-model-parallel-size`` / ``--encoder-tensor-model-parallel-size``
  (LLaVA; the encoder keeps the decoder's data-parallel size and at most
  its TP [2]_), and a MIMO-style per-module grid (``tensor_model_parallel_size``,
  ``pipeline_model_parallel_size``, ``data_parallel_size``, ``rank_offset``
  per module, as Megatron Bridge's ``ModuleParallelismConfig`` [3]_).
* **torchtitan**: ``[parallelism] module_fqns_per_model_part``, one list of
  module FQNs per pipeline stage [4]_.
* **DeepSpeed**: ``PipelineModule`` partition boundaries ``parts`` (stage s
  runs ``layers[parts[s]:parts[s+1]]``). DeepSpeed's ``partition_method``
  only takes ``"parameters"``, ``"uniform"`` or ``"type:<regex>"`` [5]_, so
  explicit boundaries are set by overriding ``_partition_layers``.

The layer roles and FQNs come from the cost model (``export_hints`` in a
``partitioner plan`` result, or ``meta.layers`` of its problem).

References
----------
.. [1] Megatron Core developer guide, "Custom Pipeline Model Parallel
   Layout"; ``megatron/core/transformer/pipeline_parallel_layer_layout.py``
   (``PipelineParallelLayerLayout.parse_str_to_list``).
.. [2] Megatron Core user guide, "encoder-decoder-parallelism package"
   (Mcore 0.9+: ``--encoder-pipeline-model-parallel-size``,
   ``--encoder-tensor-model-parallel-size``; supported in T5 and LLaVA).
.. [3] NeMo Megatron Bridge API, ``bridge.models.mimo.mimo_config``
   (``MimoParallelismConfig.module_parallelisms``, ``ModuleParallelismConfig``).
.. [4] torchtitan ``config/job_config.py``, ``Parallelism.module_fqns_per_model_part``.
.. [5] DeepSpeed ``deepspeed/runtime/pipe/module.py``, ``PipelineModule._partition_layers``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .plan import Plan, SolveResult
from .problem import Problem, ProblemError

__all__ = [
    "TARGETS",
    "Export",
    "export_plan",
    "export_result",
    "megatron_layout",
    "parse_megatron_layout",
    "hints_from_problem",
]

TARGETS = ("megatron", "torchtitan", "deepspeed")
_LLM_ROLES = ("embedding", "decoder", "loss")


@dataclass(frozen=True)
class Export:
    """Settings for one framework: machine-readable ``settings``, a paste-ready ``snippet``, and ``notes``."""

    target: str
    settings: Mapping[str, Any]
    snippet: str
    notes: tuple[str, ...] = ()
    expressible: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {
            "target": self.target,
            "expressible": self.expressible,
            "settings": dict(self.settings),
            "snippet": self.snippet,
            "notes": list(self.notes),
        }

    def text(self) -> str:
        lines = [self.snippet.rstrip()]
        lines += [f"# note: {n}" for n in self.notes]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class _Stage:
    index: int
    first: int
    last: int
    devices: int
    dp: int
    tp: int
    device_ids: tuple[int, ...]
    roles: tuple[str, ...]
    names: tuple[str, ...]
    fqns: tuple[str, ...]

    def count(self, role: str) -> int:
        return self.roles.count(role)

    @property
    def is_llm(self) -> bool:
        return any(r in _LLM_ROLES for r in self.roles)

    @property
    def is_vision(self) -> bool:
        return all(r in ("vision", "projector") for r in self.roles)

    @property
    def is_action(self) -> bool:
        return all(r == "action" for r in self.roles)


# --------------------------------------------------------------------------- layer hints


def _guess_role(name: str, module: str) -> str:
    label = f"{module} {name}".lower()
    if "vision" in label or "vit" in label:
        return "vision"
    if "projector" in label:
        return "projector"
    if "action" in label:
        return "action"
    if name.endswith(".embed"):
        return "embedding"
    if name.endswith(".head"):
        return "loss"
    return "decoder"


def hints_from_problem(problem: Problem) -> list[dict[str, Any]]:
    """Per layer ``{"name", "module", "role", "fqns"}``: the cost model's hints, or guesses from names."""
    hints = problem.meta.get("layers") if problem.meta else None
    if hints and len(hints) == problem.num_layers:
        return [dict(h) for h in hints]
    return [
        {"name": layer.name, "module": layer.module, "role": _guess_role(layer.name, layer.module), "fqns": [layer.name]}
        for layer in problem.layers
    ]


def _stages(plan: Plan, hints: Sequence[Mapping[str, Any]]) -> list[_Stage]:
    out = []
    ids = plan.device_ids()
    for p, s in enumerate(plan.stages):
        if s.last_layer >= len(hints):
            raise ProblemError(f"stage {p} ends at layer {s.last_layer}, but the hints describe {len(hints)} layers")
        sub = hints[s.first_layer : s.last_layer + 1]
        out.append(
            _Stage(
                index=p,
                first=s.first_layer,
                last=s.last_layer,
                devices=s.devices,
                dp=s.dp,
                tp=s.tp,
                device_ids=tuple(ids[p]),
                roles=tuple(str(h.get("role", "decoder")) for h in sub),
                names=tuple(str(h.get("name", "")) for h in sub),
                fqns=tuple(str(f) for h in sub for f in (h.get("fqns") or [h.get("name", "")])),
            )
        )
    return out


# --------------------------------------------------------------------------- Megatron layout strings


def _stage_symbols(stage: _Stage) -> str:
    sym = "E" if stage.count("embedding") else ""
    n = stage.count("decoder")
    sym += ("t" if n == 1 else f"t*{n}") if n else ""
    sym += "L" if stage.count("loss") else ""
    return sym


def megatron_layout(stage_symbols: Sequence[str]) -> str:
    """Join per-stage symbol strings (``"Et*3"``, ``"t*4"``, ``"t*4L"``) into a layout string.

    Runs of three or more identical stages are written ``(S|)*k``; a run
    that ends the pipeline is written ``(S|)*(k-1),S`` so that no empty
    stage follows. ``parse_megatron_layout(megatron_layout(s))`` gives the
    stages back.
    """
    chunks: list[tuple[str, bool]] = []  # (text, ends with its own stage separator)
    i, n = 0, len(stage_symbols)
    while i < n:
        j = i
        while j + 1 < n and stage_symbols[j + 1] == stage_symbols[i]:
            j += 1
        k, sym = j - i + 1, stage_symbols[i]
        if k >= 3 and sym:
            if j == n - 1:
                chunks.append((f"({sym}|)*{k - 1},{sym}", False))
            else:
                chunks.append((f"({sym}|)*{k}", True))
        else:
            chunks.extend((sym, False) for _ in range(k))
        i = j + 1
    text = ""
    for c, (chunk, closed) in enumerate(chunks):
        if c > 0:
            text += "," if chunks[c - 1][1] else "|"
        text += chunk
    return text


def parse_megatron_layout(layout: str) -> list[list[str]]:
    """Parse a ``--pipeline-model-parallel-layout`` string into per-stage symbol lists.

    Follows Megatron Core's grammar: commas are dropped, ``(...)*N`` and
    ``x*N`` are unrolled, stages are split at ``|``; symbols are ``E``,
    ``t``, ``m``, ``L``. Raises ValueError on anything else.
    """
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda g: g.group(1) * int(g.group(2)), text)
    stages = []
    for chunk in text.split("|"):
        bad = [c for c in chunk if c not in "EtmL"]
        if bad:
            raise ValueError(f"invalid layer symbol {bad[0]!r} in layout {layout!r}")
        stages.append(list(chunk))
    return stages


# --------------------------------------------------------------------------- exporters


def _grid(stages: Sequence[_Stage]) -> dict[str, Any]:
    ids = sorted(d for s in stages for d in s.device_ids)
    contiguous = ids == list(range(ids[0], ids[0] + len(ids)))
    entry = {
        "tensor_model_parallel_size": stages[0].tp,
        "pipeline_model_parallel_size": len(stages),
        "data_parallel_size": stages[0].dp,
        "rank_offset": ids[0],
    }
    if not contiguous:
        entry["device_ids"] = ids
    return entry


def _megatron(stages: list[_Stage], ctx: Mapping[str, Any]) -> Export:
    notes: list[str] = []
    llm = [s for s in stages if s.is_llm]
    vision = [s for s in stages if not s.is_llm and s.is_vision]
    action = [s for s in stages if not s.is_llm and s.is_action]
    settings: dict[str, Any] = {}
    flags: list[str] = []
    expressible = True
    if not llm:
        return Export("megatron", {}, "# this plan has no language-model stage", ("Megatron-LM's pipeline layout describes decoder stages only",), False)
    layouts = {(s.dp, s.tp) for s in llm}
    if len(layouts) == 1:
        dp, tp = next(iter(layouts))
        symbols = [_stage_symbols(s) for s in llm]
        if not any(s.count("embedding") for s in llm):
            symbols[0] = "E" + symbols[0]
            notes.append("no embedding layer in the plan: E placed on the first language-model stage")
        if not any(s.count("loss") for s in llm):
            symbols[-1] = symbols[-1] + "L"
            notes.append(
                "the model has no LM loss (its loss is the action output); L marks where Megatron computes the loss: "
                "the last language-model stage"
            )
        layout = megatron_layout(symbols)
        settings.update(tensor_model_parallel_size=tp, pipeline_model_parallel_size=len(llm),
                        data_parallel_size=dp, pipeline_model_parallel_layout=layout)
        flags += [f"--tensor-model-parallel-size {tp}", f"--pipeline-model-parallel-size {len(llm)}",
                  f"--pipeline-model-parallel-layout \"{layout}\""]
        if tp > 1 and ctx.get("sequence_parallel", True):
            flags.append("--sequence-parallel")
        if ctx.get("microbatch_size"):
            mbs = ctx["microbatch_size"] // dp if ctx["microbatch_size"] % dp == 0 else None
            if mbs:
                flags.append(f"--micro-batch-size {mbs}")
        if ctx.get("global_batch"):
            flags.append(f"--global-batch-size {ctx['global_batch']}")
    else:
        expressible = False
        desc = ", ".join(f"stage {s.index}: dp {s.dp} x tp {s.tp}" for s in llm)
        notes.append(
            "the language-model stages use different layouts (" + desc + "); Megatron-LM gives every decoder "
            "pipeline stage the same TP and DP, so --pipeline-model-parallel-layout cannot express this plan. "
            "Closest: use the stage cuts with one layout, or run the differing stages as separate MIMO modules"
        )
        settings["llm_stage_layouts"] = [{"stage": s.index, "dp": s.dp, "tp": s.tp, "layers": [s.first, s.last]} for s in llm]
    first_llm = llm[0]
    if vision:
        v_layouts = {(s.dp, s.tp) for s in vision}
        if len(v_layouts) == 1:
            grid = {"vision": _grid(vision), "language": _grid(llm)}
            if action:
                grid["action"] = _grid(action) if len({(s.dp, s.tp) for s in action}) == 1 else None
            settings["mimo_module_parallelisms"] = grid
            dp_v, tp_v = next(iter(v_layouts))
            if len(layouts) == 1 and dp_v == next(iter(layouts))[0] and tp_v <= next(iter(layouts))[1]:
                flags += [f"--encoder-pipeline-model-parallel-size {len(vision)}", f"--encoder-tensor-model-parallel-size {tp_v}"]
                settings.update(encoder_pipeline_model_parallel_size=len(vision), encoder_tensor_model_parallel_size=tp_v)
            else:
                notes.append(
                    f"the vision stages run dp {dp_v} x tp {tp_v}, the language stages "
                    + ", ".join(f"dp {d} x tp {t}" for d, t in sorted(layouts))
                    + ": Megatron Core's --encoder-* flags need the decoder's DP and at most its TP, so use the "
                    "per-module (MIMO) grid in mimo_module_parallelisms"
                )
            if any("projector" in s.roles for s in llm):
                notes.append(
                    "the projector runs on the language-model mesh (it sends the small vision features across, "
                    "seed lesson 15); Megatron's LLaVA/MIMO keep it in the vision submodule: move it there or "
                    "customize the modality submodule"
                )
        else:
            expressible = False
            notes.append("the vision stages use different layouts; Megatron gives the encoder one TP/DP for all its stages")
    elif "vision" in first_llm.roles:
        notes.append(
            "the vision encoder runs on the first pipeline stage with the first decoder layers "
            "(Megatron LLaVA default: --encoder-pipeline-model-parallel-size 0)"
        )
    if any("action" in s.roles for s in llm):
        notes.append(
            "the action head runs after the decoder layers on the last language-model stage: it is not a layer type of "
            "Megatron's layout; attach it as the model's post-process (output) module"
        )
    if action:
        expressible = False if len({(s.dp, s.tp) for s in action}) > 1 else expressible
        notes.append(
            f"the action head has its own stage(s) {[s.index for s in action]}: not part of Megatron's decoder "
            "layout; run it as a separate module (MIMO grid 'action') or fold it into the last decoder stage"
        )
    if any(str(h).find("+") >= 0 for h in ctx.get("fused_modules", ())):
        notes.append(
            "each decoder layer also holds the action expert's layer ("
            + ", ".join(sorted(set(ctx["fused_modules"])))
            + ": attention shared at every layer); Megatron's GPT layout has no such layer type, the cuts apply to both"
        )
    snippet = " \\\n    ".join(flags) if flags else "# (no Megatron-LM flags express this plan)"
    if "mimo_module_parallelisms" in settings:
        snippet += "\n# MIMO-style per-module grid (Megatron Bridge ModuleParallelismConfig fields):\n# " + json.dumps(
            settings["mimo_module_parallelisms"]
        )
    return Export("megatron", settings, snippet, tuple(notes), expressible)


def _torchtitan(stages: list[_Stage], ctx: Mapping[str, Any]) -> Export:
    parts = [list(s.fqns) for s in stages]
    layouts = {(s.dp, s.tp) for s in stages}
    notes: list[str] = []
    settings: dict[str, Any] = {"pipeline_parallel_degree": len(stages), "module_fqns_per_model_part": parts,
                                "pipeline_parallel_schedule": "1F1B"}
    lines = ["[parallelism]", f"pipeline_parallel_degree = {len(stages)}", 'pipeline_parallel_schedule = "1F1B"']
    expressible = len(layouts) == 1
    if expressible:
        dp, tp = next(iter(layouts))
        settings.update(tensor_parallel_degree=tp, data_parallel_shard_degree=dp)
        lines += [f"tensor_parallel_degree = {tp}", f"data_parallel_shard_degree = {dp}"]
        if ctx.get("microbatch_size") and ctx["microbatch_size"] % dp == 0:
            settings["pipeline_parallel_microbatch_size"] = ctx["microbatch_size"] // dp
            lines.append(f"pipeline_parallel_microbatch_size = {ctx['microbatch_size'] // dp}")
    else:
        notes.append(
            "torchtitan builds one pp x dp x tp device mesh, so every stage has the same layout; this plan's stages use "
            + ", ".join(f"dp {d} x tp {t}" for d, t in sorted(layouts))
            + ": the stage split below is usable, the per-stage layouts are not"
        )
    lines.append("module_fqns_per_model_part = [")
    lines += [f"  {json.dumps(p)}," for p in parts]
    lines.append("]")
    notes.append("FQNs follow the Hugging Face implementation named in the preset; rename them to your model class")
    return Export("torchtitan", settings, "\n".join(lines), tuple(notes), expressible)


def _deepspeed(stages: list[_Stage], ctx: Mapping[str, Any]) -> Export:
    parts = [s.first for s in stages] + [stages[-1].last + 1]
    layouts = {(s.dp, s.tp) for s in stages}
    names = [n for s in stages for n in s.names]
    settings: dict[str, Any] = {"num_stages": len(stages), "parts": parts, "layers": names}
    notes = [
        "PipelineModule(partition_method=...) accepts only 'parameters', 'uniform' or 'type:<regex>'; the override below "
        "sets the boundaries directly (a private method: checked against deepspeed/runtime/pipe/module.py)",
        f"the layer list must hold one LayerSpec per planned layer, in order ({len(names)}: {names[0]} .. {names[-1]})",
    ]
    expressible = len(layouts) == 1
    if expressible:
        dp, tp = next(iter(layouts))
        settings.update(model_parallel_size=tp, data_parallel_size=dp)
        topo = f"PipeModelDataParallelTopology(num_pp={len(stages)}, num_mp={tp}, num_dp={dp})"
    else:
        topo = "None  # not expressible: see note"
        notes.append(
            "DeepSpeed's PipeModelDataParallelTopology gives every stage the same model- and data-parallel degree; "
            "this plan's stages use " + ", ".join(f"dp {d} x tp {t}" for d, t in sorted(layouts))
        )
    snippet = "\n".join(
        [
            "from deepspeed.pipe import PipelineModule",
            "from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology",
            "",
            f"PARTS = {parts}  # stage s runs layers[PARTS[s]:PARTS[s + 1]]",
            "",
            "class PlannedPipelineModule(PipelineModule):",
            "    def _partition_layers(self, method='uniform'):",
            "        stage_id = self._topo.get_coord(self.global_rank).pipe",
            "        self.parts = list(PARTS)",
            "        self._set_bounds(start=self.parts[stage_id], stop=self.parts[stage_id + 1])",
            "",
            f"model = PlannedPipelineModule(layers=layers, num_stages={len(stages)}, topology={topo})",
        ]
    )
    return Export("deepspeed", settings, snippet, tuple(notes), expressible)


_EXPORTERS = {"megatron": _megatron, "torchtitan": _torchtitan, "deepspeed": _deepspeed}


def export_plan(plan: Plan, hints: Sequence[Mapping[str, Any]], target: str, **context: Any) -> Export:
    """Export ``plan`` to ``target`` (one of :data:`TARGETS`).

    ``hints`` gives each layer's ``name``, ``role`` (vision, projector,
    embedding, decoder, loss, action) and ``fqns``; ``context`` may carry
    ``microbatch_size``, ``global_batch`` and ``sequence_parallel``.
    """
    if target not in _EXPORTERS:
        raise ProblemError(f"unknown export target {target!r} (targets: {', '.join(TARGETS)})", path="--to")
    context = dict(context)
    context.setdefault("fused_modules", tuple(str(h.get("module", "")) for h in hints if "+" in str(h.get("module", ""))))
    return _EXPORTERS[target](_stages(plan, hints), context)


def export_result(result: SolveResult | Mapping[str, Any], target: str, problem: Problem | None = None) -> Export:
    """Export a result (a :class:`SolveResult`, or a result document from ``plan --json``/``solve --json``).

    Layer hints come from ``problem`` when given, else from the result's
    ``export_hints`` (written by ``partitioner plan``).
    """
    if isinstance(result, SolveResult):
        doc = result.to_dict()
        plan = result.plan
    else:
        doc = dict(result)
        plan = Plan.from_dict(doc) if doc.get("plan") is not None or "stages" in doc else None
    if plan is None:
        raise ProblemError("has no plan to export (was it infeasible?)", path="plan")
    if problem is None and getattr(result, "problem", None) is not None:
        problem = result.problem  # type: ignore[union-attr]
    if problem is not None:
        hints = hints_from_problem(problem)
        meta = problem.meta or {}
        context = {"microbatch_size": meta.get("microbatch_size"), "global_batch": meta.get("global_batch")}
    else:
        hint_doc = doc.get("export_hints")
        if not isinstance(hint_doc, Mapping) or not isinstance(hint_doc.get("layers"), list):
            raise ProblemError(
                "has no export_hints (results of `partitioner plan` carry them); pass the problem with --problem",
                path="export_hints",
            )
        hints = hint_doc["layers"]
        gb, m = doc.get("global_batch"), doc.get("microbatches")
        context = {"global_batch": gb, "microbatch_size": gb // m if isinstance(gb, int) and isinstance(m, int) and m else None}
    return export_plan(plan, hints, target, **context)
