"""``estimate``: a layout as the user states it (Megatron-style flags, or a recipe file) evaluated on a model.

The layout comes from ``--recipe FILE`` (a Megatron-LM argument list, a
Megatron Bridge config, a torchtitan TOML or a DeepSpeed config) and the flags ``--tp --pp --vpp --cp --ep --etp --dp --mbs
--gbs --recompute --recompute-modules --distributed-optimizer --zero
--pipeline-model-parallel-layout --sequence-parallel``, a flag overriding
the file. Exit codes: 0 -- the layout fits; 1 -- it does not fit in memory
(reported in full, the times of the same plan with the memory check
lifted); 2 -- bad input, one line naming the option (a layout that breaks a
rule of Megatron-LM or of the cost model, :mod:`partitioner.planning.recipes.estimate`).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from ..problem import ProblemError
from .common import EXIT_NO_PLAN, EXIT_OK, app, check_choice, guarded, parse_options, working
from .render import print_estimate, print_json, print_sequences

__all__ = ["estimate_cmd", "stated_fields", "read_recipe"]

def read_recipe(path: Path, fmt: str = "auto") -> Any:
    """The :class:`~partitioner.frameworks.recipe.Recipe` of a recipe file, read by its format's reader
    (:func:`~partitioner.frameworks.recipe_files.read_recipe_file`)."""
    from ..frameworks.recipe_files import RECIPE_FORMATS, read_recipe_file

    check_choice(fmt, RECIPE_FORMATS, "--recipe-format")
    return read_recipe_file(path, fmt)


def stated_fields(**given: Any) -> dict[str, Any]:
    """The recipe fields the flags state (None: not given), the memory knobs resolved.

    ``recompute`` and ``recompute_modules`` make one setting (modules need the
    selective granularity or none stated); ``distributed_optimizer`` is ZeRO-1,
    which a different ``--zero`` contradicts.
    """
    from ..costs.memory.recompute_names import setting_of

    fields = {k: v for k, v in given.items() if v is not None and k not in ("recompute_modules", "distributed_optimizer")}
    recompute, modules = given.get("recompute"), given.get("recompute_modules")
    if recompute is not None:
        check_choice(recompute, ("none", "selective", "full"), "--recompute")
    if modules:
        if recompute not in (None, "selective"):
            raise ProblemError(f"modules are recomputed under --recompute selective, not {recompute}",
                               path="--recompute-modules")
        names = [m for part in modules for m in part.replace(",", " ").split()]
        try:
            fields["recompute"] = setting_of(names) if names else "none"
        except ValueError as err:
            raise ProblemError(str(err), path="--recompute-modules") from None
        bad = [m for m in names if m not in _modules()]
        if bad:
            raise ProblemError(f"unknown module(s) {', '.join(bad)} (Megatron-Core's: {', '.join(_modules())})",
                               path="--recompute-modules")
    if given.get("distributed_optimizer"):
        if given.get("zero") not in (None, 1):
            raise ProblemError(f"--zero {given['zero']} contradicts --distributed-optimizer (ZeRO-1)", path="--zero")
        fields["zero"] = 1
    return fields


def _modules() -> tuple[str, ...]:
    from ..costs.memory.recompute_names import MODULES

    return MODULES


@app.command("estimate")
@guarded
def estimate_cmd(
    model: str = typer.Option(..., "--model", help="Model preset name or YAML / config.json path (see `partitioner models`)."),
    cluster: str = typer.Option(..., "--cluster", help="Cluster preset name or YAML path (see `partitioner clusters`)."),
    nodes: Optional[int] = typer.Option(None, "--nodes", help="Number of nodes (default: the recipe's --nnodes)."),
    global_batch: Optional[int] = typer.Option(None, "--global-batch", "--gbs", "--global-batch-size",
                                               help="Samples per iteration (Megatron's --global-batch-size)."),
    recipe: Optional[Path] = typer.Option(None, "--recipe", help="A recipe file: a Megatron-LM argument list (a launch "
                                                                 "line or script), a Megatron Bridge config (YAML, "
                                                                 "Hydra overrides, a Python recipe's assignments), a "
                                                                 "torchtitan TOML or a DeepSpeed config JSON (or "
                                                                 "`export --to deepspeed --json`); flags override it."),
    recipe_format: str = typer.Option("auto", "--recipe-format",
                                      help="auto (.toml: torchtitan; .json with train_batch_size, "
                                           "train_micro_batch_size_per_gpu, gradient_accumulation_steps or "
                                           "zero_optimization: deepspeed; .yaml/.yml/.json/.py: bridge; else megatron, "
                                           "or bridge for Hydra overrides) | megatron | bridge | torchtitan | deepspeed"),
    tp: Optional[int] = typer.Option(None, "--tp", "--tensor-model-parallel-size", help="Tensor-parallel size (default 1)."),
    pp: Optional[int] = typer.Option(None, "--pp", "--pipeline-model-parallel-size", help="Pipeline-parallel size (default 1)."),
    vpp: Optional[int] = typer.Option(None, "--vpp", "--num-virtual-stages-per-pipeline-rank",
                                      help="Virtual stages per pipeline rank: interleaved 1F1B (default 1)."),
    cp: Optional[int] = typer.Option(None, "--cp", "--context-parallel-size", help="Context-parallel size (default 1)."),
    cp_comm_type: Optional[str] = typer.Option(None, "--cp-comm-type",
                                               help="p2p (ring, default) | a2a (Ulysses) | allgather: the CP attention."),
    ep: Optional[int] = typer.Option(None, "--ep", "--expert-model-parallel-size", help="Expert-parallel size (default 1)."),
    etp: Optional[int] = typer.Option(None, "--etp", "--expert-tensor-parallel-size",
                                      help="Expert tensor-parallel size (default: tp, as Megatron-LM)."),
    dp: Optional[int] = typer.Option(None, "--dp", help="Data-parallel size, checked against world / (tp x pp x cp)."),
    mbs: Optional[int] = typer.Option(None, "--mbs", "--micro-batch-size", help="Samples per microbatch per replica (default 1)."),
    recompute: Optional[str] = typer.Option(None, "--recompute", "--recompute-granularity", help="none | selective | full"),
    recompute_modules: Optional[List[str]] = typer.Option(None, "--recompute-modules",
                                                          help="Megatron-Core modules to recompute (core_attn, layernorm, "
                                                               "mla_up_proj, mlp, moe_act, shared_experts, moe; comma- or "
                                                               "space-separated, repeatable)."),
    distributed_optimizer: bool = typer.Option(False, "--distributed-optimizer", "--use-distributed-optimizer",
                                               help="Megatron's distributed optimizer (ZeRO-1)."),
    zero: Optional[int] = typer.Option(None, "--zero", help="ZeRO stage: 0, 1 (distributed optimizer) or 3 (FSDP)."),
    pipeline_layout: Optional[str] = typer.Option(None, "--pipeline-model-parallel-layout",
                                                  help="Megatron's layout string, e.g. 'Et*3|(t*4|)*6,t*3L' (vpp = stages / pp)."),
    sequence_parallel: Optional[bool] = typer.Option(None, "--sequence-parallel/--no-sequence-parallel",
                                                     help="Megatron's sequence parallelism (default: the cost options', on)."),
    num_layers: Optional[int] = typer.Option(None, "--num-layers", help="Decoder layers, checked against the model's."),
    first_stage_layers: Optional[int] = typer.Option(None, "--decoder-first-pipeline-num-layers",
                                                     help="Decoder layers of the first stage (an uneven split)."),
    last_stage_layers: Optional[int] = typer.Option(None, "--decoder-last-pipeline-num-layers",
                                                    help="Decoder layers of the last stage (an uneven split)."),
    precision: Optional[str] = typer.Option(None, "--precision", help="bf16 | fp8: the GEMM precision of the blocks."),
    fp8_recipe: Optional[str] = typer.Option(None, "--fp8-recipe", help="With fp8: tensorwise | delayed | blockwise | mxfp8 | rowwise."),
    cost_option: Optional[List[str]] = typer.Option(None, "--cost-option", "-c", help="Cost-model option key=value (repeatable)."),
    as_json: bool = typer.Option(False, "--json", help="Print the estimate as JSON."),
    gantt: Optional[Path] = typer.Option(None, "--gantt", help="Write a Gantt chart of the layout's iteration (PNG/SVG)."),
    images: Optional[int] = typer.Option(None, "--images", help="Images (or video clips) per sample."),
    image_size: Optional[int] = typer.Option(None, "--image-size", help="Image side in px."),
    tiles: Optional[int] = typer.Option(None, "--tiles", help="Tiles per image."),
    frames: Optional[int] = typer.Option(None, "--frames", help="Frames per video clip."),
    fps: Optional[float] = typer.Option(None, "--fps", help="Frame rate of the sampled frames."),
    text_tokens: Optional[int] = typer.Option(None, "--text-tokens", help="Text tokens per sample."),
    mtp_layers: Optional[int] = typer.Option(None, "--mtp-layers", help="Multi-token prediction modules to train."),
) -> None:
    """Estimate a stated layout: per-stage memory and time, bubble, iteration, MFU, tokens/s; exit 1 if it does not fit.

    The layout is Megatron-LM's: world = tp x pp x cp x dp, the decoder layers split evenly over pp x vpp (or as
    --pipeline-model-parallel-layout says), the vision encoder on the first stage. It is costed by the cost model
    `plan` uses, evaluated and replayed in the simulator.
    """
    from ..frameworks.recipe import Recipe
    from ..planning.recipes.estimate import estimate
    from ..presets import Workload, load_model, sequence_summary

    base = read_recipe(recipe, recipe_format) if recipe is not None else None
    if cp_comm_type is not None:
        from ..frameworks.megatron.recipe import CP_COMM_TYPES

        check_choice(cp_comm_type, tuple(CP_COMM_TYPES), "--cp-comm-type")
    flags = stated_fields(cp_algorithm=None if cp_comm_type is None else CP_COMM_TYPES[cp_comm_type],
                          tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, etp=etp, dp=dp, mbs=mbs, gbs=global_batch, zero=zero,
                          recompute=recompute, recompute_modules=recompute_modules,
                          distributed_optimizer=distributed_optimizer, pipeline_layout=pipeline_layout,
                          sequence_parallel=sequence_parallel, num_layers=num_layers, precision=precision,
                          fp8_recipe=fp8_recipe, first_stage_layers=first_stage_layers,
                          last_stage_layers=last_stage_layers)
    fields = {**(base.stated() if base is not None else {}), **flags}
    fields = {k: v for k, v in fields.items() if v is not None}
    origin = {**(dict(base.origin) if base is not None else {}), **{k: _flag(k) for k in flags}}
    stated = Recipe.from_fields(fields, origin, base.notes if base is not None else ())
    workload = Workload(images=images, image_size=image_size, tiles=tiles, frames=frames, fps=fps,
                        text_tokens=text_tokens, mtp_layers=mtp_layers)
    if gantt is not None:  # a wrong suffix was an internal error after the estimate
        from ..simulate.viz import IMAGE_FORMATS

        check_choice(gantt.suffix.lower().lstrip("."), IMAGE_FORMATS, f"--gantt {gantt}: suffix")
    spec = load_model(model, workload)
    with working(f"estimating {model} on {cluster}"):
        result = estimate(spec, cluster, stated, nodes=nodes, options=parse_options(cost_option))
    if gantt is not None:
        _write_gantt(result, gantt)
    if as_json:
        print_json({**result.to_dict(), "sequences": sequence_summary(spec, workload)})
    else:
        print_estimate(result)
        print_sequences(sequence_summary(spec, workload))
    raise typer.Exit(EXIT_OK if result.fits else EXIT_NO_PLAN)


def _write_gantt(result: Any, path: Path) -> None:
    """The replay of the estimate's plan as a Gantt chart (the evaluation's times: with the memory check lifted
    when it does not fit)."""
    from ..simulate.engine import simulate
    from ..simulate.viz import save_gantt

    sim = simulate(result.problem, result.plan, evaluation=result.evaluation)
    save_gantt(sim, path, title=f"{result.model}: estimate ({'fits' if result.fits else 'does not fit'})")


def _flag(name: str) -> str:
    """The flag of a recipe field on this command (the recipe's own names: ``--tp``, ``--gbs`` ...)."""
    from ..frameworks.recipe import RECIPE_FIELDS

    return RECIPE_FIELDS[name]
