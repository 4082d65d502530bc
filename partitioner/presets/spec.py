"""Model and cluster specs, and parameter counts from their shapes.

Contract: :class:`ModuleSpec` (one module's matmul dimensions, per kind),
:class:`ModelSpec` (modules in execution order), :class:`ClusterSpec` (one
kind of GPU node); :func:`module_params` and :func:`module_layer_params`
count parameters from the shapes, so a preset's published total checks its
dimensions. Pure data and arithmetic: no files.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

__all__ = [
    "MODULE_KINDS",
    "ModuleSpec",
    "ModelSpec",
    "ClusterSpec",
    "block_params",
    "module_layer_params",
    "module_params",
    "with_module",
]

MODULE_KINDS = ("vit", "projector", "llm", "action_expert", "action_head")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class ModuleSpec:
    """One module of a model, with the dimensions of its matmuls.

    Only the fields of the module's ``kind`` are used:

    * ``vit`` -- a vision transformer: ``layers, hidden, heads, ffn``; images
      of ``image_size`` px cut in ``patch`` px patches (``temporal_patch``
      frames per patch for video-capable encoders), ``images`` per sample
      (video clips of ``frames`` frames, whose patches attend jointly),
      ``extra_tokens`` (class and register tokens); bidirectional attention.
    * ``projector`` -- an MLP ``in_dim -> dims[0] -> ... -> dims[-1]`` over
      ``tokens`` tokens per sample (optionally a norm of ``pre_norm_dim``).
    * ``llm`` -- a decoder: ``layers, hidden, heads, kv_heads, head_dim,
      ffn, gated, vocab``; ``text_tokens`` per sample on top of the image
      tokens; causal attention (``attention: prefix`` makes the prefix
      bidirectional, as in PaliGemma); ``lm_head`` adds the output layer and
      the loss.
    * ``action_expert`` -- a second transformer that shares attention with
      the LLM at every layer (pi0): ``tokens`` suffix tokens, same layer
      count as the LLM; the problem fuses LLM layer i and expert layer i.
    * ``action_head`` -- a transformer after the LLM over ``tokens`` action
      tokens plus ``cond_tokens`` conditioning tokens projected from the
      LLM's last hidden states; ``passes`` forward passes per sample.
    """

    name: str
    kind: str
    layers: int = 1
    hidden: int = 0
    heads: int = 1
    kv_heads: int = 0  # 0: same as heads
    head_dim: int = 0  # 0: hidden / heads
    ffn: int = 0
    gated: bool = False  # gated MLP (SwiGLU / GeGLU): three matrices instead of two
    bias: bool = False  # linear layers carry biases
    qkv_bias: bool | None = None  # None: as ``bias``
    norm: str = "layernorm"  # layernorm (weight + bias) | rmsnorm (weight)
    layerscale: bool = False
    qk_norm: bool = False
    activation: str = "gelu"  # MLP activation: gelu | gelu_tanh | silu | quick_gelu (x * sigmoid(1.702 x))
    fused_qkv: bool = False  # one QKV projection (its output stays alive through V's view when Q, K are rotated)
    dropout: bool = False  # trained with dropout (attention and residual): masks are kept
    final_norm: bool = True
    # vit
    patch: int = 14
    image_size: int = 224
    images: int = 1
    channels: int = 3
    temporal_patch: int = 1
    frames: int = 1  # frames per video clip (``images`` then counts clips): frames / temporal_patch patch groups
    extra_tokens: int = 0
    pos_embed: str = "learned"  # learned | none (rotary)
    pre_norm: bool = False  # a norm before the first block (CLIP)
    output_tokens: int = 0  # patch tokens per image handed on (0: all patches)
    patch_bias: bool | None = None  # the patch embedding's bias (None: as ``bias``; CLIP and Qwen2-VL have none)
    pos_tokens: int = 0  # learned position embeddings (0: one per token of the image, class and register tokens too)
    feature_layer: int = -1  # the block whose output is the features (-1: the last; -2: the second-to-last)
    pool_head: bool = False  # SigLIP's attention-pooling head (vision_use_head)
    # projector
    in_dim: int = 0
    dims: tuple[int, ...] = ()
    tokens: int = 0
    pre_norm_dim: int = 0
    # llm
    vocab: int = 0
    tie_embeddings: bool = False
    text_tokens: int = 0
    lm_head: bool = True
    attention: str = "causal"  # causal | prefix | bidirectional
    # action expert / head
    action_dim: int = 0
    state_dim: int = 0
    cond_tokens: int = 0
    cond_dim: int = 0
    passes: int = 1
    # training
    frozen: bool = False
    # provenance and export hints
    source: str = ""
    fqn: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def attn_dim(self) -> int:
        """Width of the query (and output-projection input): heads x head_dim."""
        return self.heads * self.d_head

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.d_head

    @property
    def patches_per_image(self) -> int:
        return (self.image_size // self.patch) ** 2

    @property
    def patches_per_clip(self) -> int:
        """Patch tokens of one image, or of one video clip of ``frames`` frames (``temporal_patch`` frames per patch)."""
        return self.patches_per_image * max(1, self.frames // self.temporal_patch)

    @property
    def tokens_per_image(self) -> int:
        """Tokens a vision encoder's attention sees per image (or clip: its frames attend jointly)."""
        return self.patches_per_clip + self.extra_tokens

    @property
    def out_dim(self) -> int:
        """Width of the tensor the module hands on."""
        if self.kind == "projector":
            return self.dims[-1]
        return self.hidden


@dataclass(frozen=True)
class ModelSpec:
    """A model: modules in execution order, plus what one training sample holds."""

    name: str
    modules: tuple[ModuleSpec, ...]
    title: str = ""
    published_params: float | None = None
    references: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""
    source: str | None = field(default=None, compare=False)

    def module(self, name: str) -> ModuleSpec:
        for m in self.modules:
            if m.name == name:
                return m
        raise KeyError(name)

    def of_kind(self, kind: str) -> list[ModuleSpec]:
        return [m for m in self.modules if m.kind == kind]

    @property
    def llm(self) -> ModuleSpec | None:
        found = self.of_kind("llm")
        return found[0] if found else None

    @property
    def image_tokens(self) -> int:
        """Image tokens per sample entering the language model (the projectors' output)."""
        return sum(m.tokens for m in self.of_kind("projector"))

    @property
    def llm_tokens(self) -> int:
        """Sequence length of the language model per sample."""
        llm = self.llm
        return self.image_tokens + (llm.text_tokens if llm else 0)

    @property
    def params(self) -> int:
        return sum(module_params(m) for m in self.modules)

    def summary(self) -> dict[str, Any]:
        """``{"name", "params", "modules": [{"name", "kind", "layers", "params"}]}`` (CLI ``models --json``)."""
        doc: dict[str, Any] = {
            "name": self.name,
            "params": self.params,
            "modules": [
                {"name": m.name, "kind": m.kind, "layers": m.layers, "params": module_params(m)} for m in self.modules
            ],
        }
        if self.title:
            doc["title"] = self.title
        if self.published_params:
            doc["published_params"] = self.published_params
        return doc


@dataclass(frozen=True)
class ClusterSpec:
    """One kind of GPU node; ``nodes`` is chosen when a problem is built."""

    name: str
    gpus_per_node: int
    gpu_memory_bytes: int
    peak_tflops: float  # dense bf16 tensor-core peak per GPU
    intra_node_GBps: float  # NVLink, per GPU and direction
    inter_node_GBps: float  # network, per GPU and direction
    gpu: str = ""
    title: str = ""
    references: Mapping[str, str] = field(default_factory=dict)
    source: str | None = field(default=None, compare=False)

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpu": self.gpu,
            "gpus_per_node": self.gpus_per_node,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "peak_tflops": self.peak_tflops,
            "intra_node_GBps": self.intra_node_GBps,
            "inter_node_GBps": self.inter_node_GBps,
        }


# --------------------------------------------------------------------------- parameter counts


def _norm_params(spec: ModuleSpec, width: int) -> int:
    return 2 * width if spec.norm == "layernorm" else width


def _linear(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


def block_params(spec: ModuleSpec) -> int:
    """Parameters of one transformer block of ``spec`` (vit, llm, action expert or head)."""
    h = spec.hidden
    qkv_bias = spec.bias if spec.qkv_bias is None else spec.qkv_bias
    p = _linear(h, spec.attn_dim + 2 * spec.kv_dim, qkv_bias)
    p += _linear(spec.attn_dim, h, spec.bias)
    n_mlp_in = 2 if spec.gated else 1
    p += n_mlp_in * _linear(h, spec.ffn, spec.bias) + _linear(spec.ffn, h, spec.bias)
    p += 2 * _norm_params(spec, h)
    if spec.layerscale:
        p += 2 * h
    if spec.qk_norm:
        p += 2 * _norm_params(spec, spec.attn_dim)
    return p


def module_layer_params(spec: ModuleSpec) -> dict[str, int]:
    """Parameters by part: ``pre`` (before the first block), ``block`` (each), ``post`` (after the last).

    For an ``llm``, ``pre`` is the token embedding and ``post`` the final
    norm plus an untied LM head; for a projector everything is ``pre``.
    """
    k = spec.kind
    if k == "projector":
        p = 2 * spec.pre_norm_dim if spec.pre_norm_dim else 0
        d = spec.in_dim
        for out in spec.dims:
            p += _linear(d, out, True)
            d = out
        return {"pre": p, "block": 0, "post": 0}
    block = block_params(spec)
    h = spec.hidden
    post = _norm_params(spec, h) if spec.final_norm else 0
    if k == "vit":
        patch_bias = spec.bias if spec.patch_bias is None else spec.patch_bias
        pre = spec.channels * spec.temporal_patch * spec.patch**2 * h + (h if patch_bias else 0)
        if spec.pos_embed == "learned":
            pre += (spec.pos_tokens or spec.tokens_per_image) * h
        pre += spec.extra_tokens * h
        if spec.pre_norm:
            pre += _norm_params(spec, h)
        if spec.pool_head:  # probe, attention (in + out projections with biases), norm, MLP
            post += h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + _linear(h, spec.ffn, True) + _linear(spec.ffn, h, True)
        return {"pre": pre, "block": block, "post": post}
    if k == "llm":
        pre = spec.vocab * h
        if spec.lm_head and not spec.tie_embeddings:
            post += spec.vocab * h
        return {"pre": pre, "block": block, "post": post}
    if k == "action_expert":
        # pi0: state and noisy-action projections, the time MLP (in), the action output projection (out)
        pre = _linear(spec.state_dim, h, True) + _linear(spec.action_dim, h, True)
        pre += _linear(2 * h, h, True) + _linear(h, h, True)
        post += _linear(h, spec.action_dim, True)
        return {"pre": pre, "block": block, "post": post}
    if k == "action_head":
        pre = _linear(spec.cond_dim, h, True) + _linear(spec.action_dim, h, True)
        post += _linear(h, spec.action_dim, True)
        return {"pre": pre, "block": block, "post": post}
    raise ValueError(f"unknown module kind {k!r}")


def module_params(spec: ModuleSpec) -> int:
    """Total parameters of a module, counted from its shapes."""
    parts = module_layer_params(spec)
    return parts["pre"] + spec.layers * parts["block"] + parts["post"]



def with_module(model: ModelSpec, name: str, **changes: Any) -> ModelSpec:
    """A copy of ``model`` with fields of module ``name`` changed (e.g. ``frozen=True``)."""
    return replace(model, modules=tuple(replace(m, **changes) if m.name == name else m for m in model.modules))

