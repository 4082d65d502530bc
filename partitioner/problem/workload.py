"""What the cost model built a problem from, typed: :class:`ModelWorkload` and its :class:`LayerHint` records.

A problem's ``meta`` is free-form in the format (any JSON object); the cost
model (:mod:`partitioner.costs`) writes the model's workload there -- its
name, the cluster, the global batch, tokens per sample, model FLOPs per
iteration, the GPUs' peak FLOPs, and per layer its role and module FQNs.
:meth:`ModelWorkload.of` reads those keys once, leniently (a key that is
absent or not of its type keeps its default, as a hand-written ``meta`` may
hold anything); :attr:`~.records.Problem.workload` is that reading, so the planner,
the throughput and the exports read typed fields instead of ``meta`` keys.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..core.errors import ProblemError

__all__ = ["LayerHint", "ModelWorkload"]


def _number(value: Any) -> float | None:
    """``value`` as a float when it is a real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _count(value: Any) -> int | None:
    """``value`` when it is an integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class LayerHint:
    """One layer as the cost model describes it: its name, module, role, module FQNs and parameters.

    ``role`` is one of ``vision``, ``projector``, ``embedding``,
    ``decoder``, ``loss``, ``action``; ``fqns`` are Hugging Face module
    names (the layer's name when the cost model gave none);
    ``recompute_modules`` the recompute modules that act on the layer
    (:func:`partitioner.costs.memory.recompute.acting_modules`; None when the cost
    model gave none).
    """

    name: str
    module: str = ""
    role: str = "decoder"
    fqns: tuple[str, ...] = ()
    params: int = 0
    recompute_modules: tuple[str, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        """The FQNs, or the layer's name when there are none."""
        return self.fqns or (self.name,)

    def to_dict(self) -> dict[str, Any]:
        """The layer as ``meta.layers`` and ``export_hints.layers`` write it."""
        doc: dict[str, Any] = {"name": self.name, "module": self.module, "role": self.role, "params": self.params,
                               "fqns": list(self.fqns)}
        if self.recompute_modules is not None:
            doc.update(recompute_modules=list(self.recompute_modules))
        return doc

    @classmethod
    def of(cls, doc: Any, where: str) -> "LayerHint":
        """The hint of a ``{"name", "module", "role", "fqns"}`` object (missing keys: the defaults).

        Raises :class:`ProblemError` at ``where`` when ``doc`` is not an object
        or its ``fqns`` not a list.
        """
        if not isinstance(doc, Mapping):
            raise ProblemError("must be an object with name, module, role and fqns", path=where)
        fqns = doc.get("fqns") or ()
        if not isinstance(fqns, (list, tuple)):
            raise ProblemError(f"must be a list of module names, got {fqns!r}", path=f"{where}.fqns")
        acts = doc.get("recompute_modules")
        if acts is not None and not isinstance(acts, (list, tuple)):
            raise ProblemError(f"must be a list of recompute modules, got {acts!r}", path=f"{where}.recompute_modules")
        return cls(str(doc.get("name", "")), str(doc.get("module", "")), str(doc.get("role", "decoder")),
                   tuple(str(f) for f in fqns), _count(doc.get("params")) or 0,
                   None if acts is None else tuple(str(m) for m in acts))


def _mapping(value: Any) -> Mapping[str, Any] | None:
    """``value`` when it is a mapping, else None."""
    return value if isinstance(value, Mapping) else None


def _layers(docs: Any) -> tuple[LayerHint, ...]:
    """The hints of ``meta.layers``, or none when it is not a list of well-formed objects."""
    if not isinstance(docs, (list, tuple)):
        return ()
    try:
        return tuple(LayerHint.of(doc, f"meta.layers[{i}]") for i, doc in enumerate(docs))
    except ProblemError:
        return ()


@dataclass(frozen=True)
class ModelWorkload:
    """The model's workload and the hardware's peak, as the cost model wrote them into a problem's ``meta``.

    Parameters
    ----------
    model, cluster : str
        The model and cluster preset names ("" when the problem was not built by the cost model).
    nodes : int
        Nodes of the cluster (0 when unknown).
    global_batch : int or None
        Samples per iteration (None when unknown).
    llm_tokens_per_sample : float
        Language-model tokens per sample.
    model_flops_per_iteration : float
        Model FLOPs of one iteration (forward and backward, no recompute) [PaLM, App. B].
    forward_flops_per_sample : float
        Forward FLOPs of one sample.
    peak_flops_per_gpu : float
        The GPU's dense bf16 peak (FLOP/s).
    params : float
        The model's parameters.
    layers : tuple of LayerHint
        One per pipeline layer (none when ``meta`` has none).
    precision : mapping or None
        The FP8 training the problem was costed with (``meta.precision``, as
        :func:`partitioner.costs.compute.precision.precision_summary` writes it; None under BF16).
    microbatch_size : float
        Samples per microbatch, the global batch over m (0 when unknown).
    cost_options : mapping or None
        The cost options the problem was built with (``meta.options``, as
        :meth:`partitioner.costs.CostOptions.to_dict` writes them; None when absent).

    References
    ----------
    .. [PaLM] Chowdhery et al., "PaLM: Scaling Language Modeling with Pathways", 2022, Appendix B.
    """

    model: str = ""
    cluster: str = ""
    nodes: int = 0
    global_batch: int | None = None
    llm_tokens_per_sample: float = 0.0
    model_flops_per_iteration: float = 0.0
    forward_flops_per_sample: float = 0.0
    peak_flops_per_gpu: float = 0.0
    params: float = 0.0
    layers: tuple[LayerHint, ...] = ()
    precision: Mapping[str, Any] | None = None
    microbatch_size: float = 0.0
    cost_options: Mapping[str, Any] | None = None

    @classmethod
    def of(cls, meta: Mapping[str, Any] | None) -> "ModelWorkload":
        """The workload ``meta`` holds (each key absent or not of its type: the default)."""
        meta = meta or {}

        def text(key: str) -> str:
            value = meta.get(key)
            return value if isinstance(value, str) else ""

        def number(key: str) -> float:
            value = _number(meta.get(key))
            return 0.0 if value is None else value

        return cls(model=text("model"), cluster=text("cluster"), nodes=_count(meta.get("nodes")) or 0,
                   global_batch=_count(meta.get("global_batch")), llm_tokens_per_sample=number("llm_tokens_per_sample"),
                   model_flops_per_iteration=number("model_flops_per_iteration"),
                   forward_flops_per_sample=number("forward_flops_per_sample"),
                   peak_flops_per_gpu=number("peak_flops_per_gpu"), params=number("params"),
                   layers=_layers(meta.get("layers")), precision=_mapping(meta.get("precision")),
                   microbatch_size=number("microbatch_size"), cost_options=_mapping(meta.get("options")))

    def tokens_per_iteration(self) -> float:
        """Language-model tokens of one iteration (0 when the batch is unknown)."""
        return float(self.global_batch or 0) * self.llm_tokens_per_sample
