"""Model and cluster specs, and parameter counts from their shapes.

Contract: :class:`ModuleSpec` (one module's matmul dimensions, per kind),
:class:`ModelSpec` (modules in execution order), :class:`ClusterSpec` (one
kind of GPU node); :func:`module_params` and :func:`module_layer_params`
count parameters from the shapes, so a preset's published total checks its
dimensions. Pure data and arithmetic: no files.

More (the detail of this module): ``docs/internals/presets.md``, section ``partitioner.presets.spec``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ..problem import Level, level_doc

__all__ = [
    "MODULE_KINDS",
    "ModuleSpec",
    "ModelSpec",
    "ClusterSpec",
    "GPU_GENERATIONS",
    "gpu_generation",
    "block_params",
    "is_moe_layer",
    "is_cross_layer",
    "mla_down_params",
    "mtp_block_index",
    "mtp_layer_params",
    "layer_block_params",
    "layer_active_params",
    "module_active_params",
    "module_layer_params",
    "module_params",
    "with_module",
]

MODULE_KINDS = ("vit", "projector", "llm", "action_expert", "action_head")

# GPU generations whose cost-model constants (GEMM efficiency, SMs) the cost model knows
# (:mod:`partitioner.costs.compute.hardware`); a cluster names one (``generation``) or its ``gpu`` implies it.
GPU_GENERATIONS = ("a100", "h100", "h200", "b200", "gb200")
_GPU_MARKS = (("gb200", ("GB200",)), ("b200", ("B200", "B100")), ("h200", ("H200",)), ("h100", ("H100", "H800")),
              ("a100", ("A100", "A800")))


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

    Mixture of experts (any block module): ``experts`` routed experts of
    width ``moe_ffn`` (gated when ``gated``), ``top_k`` of them per token
    (``norm_topk``: the k weights renormalised, no parameters), a router
    ``hidden x experts``, a shared MLP of width ``shared_ffn`` (all shared
    experts together; 0: none). Layer i is a MoE layer when ``i >=
    first_dense``, ``i`` is not in ``dense_layers`` and ``(i + 1) %
    moe_every == 0`` (transformers' ``first_k_dense_replace``,
    ``mlp_only_layers``, ``decoder_sparse_step``); the other layers have the
    dense MLP of width ``ffn``.

    Cross-attention (``llm``): the layers in ``cross_layers`` (mllama) hold
    a gated cross-attention over the vision states (``cross_tokens`` per
    sample, already projected to ``hidden``) instead of self-attention.

    Multi-head latent attention (``kv_lora_rank`` > 0; DeepSeek-V2/V3,
    Kimi-K2 [40]_ [41]_): queries come from ``hidden`` directly (``q_lora_rank``
    0) or through a down-projection to ``q_lora_rank``, a norm and an
    up-projection; keys and values from one down-projection to the latent
    (``kv_lora_rank``) plus a shared rotary key of ``rope_head_dim``, a norm,
    and an up-projection to every head's non-rotary key (``head_dim``, the
    ``qk_nope_head_dim``) and value (``v_head_dim``). A head's query and key
    are ``head_dim + rope_head_dim`` wide (:attr:`ModuleSpec.qk_head_dim`);
    the output projection reads ``heads x v_head_dim``. ``qkv_bias`` puts
    biases on the down-projections and the output projection
    (``attention_bias``). ``kv_heads`` is 0 or ``heads`` (every head has its
    own key and value after the up-projection).

    Multi-token prediction (``llm``, ``mtp_layers`` > 0; DeepSeek-V3 [41]_
    Section 2.2): that many modules after the last block, each a norm of the
    shifted tokens' embedding and of the previous depth's hidden state, a
    projection ``2 hidden -> hidden``, one block like the last one, and a
    norm; the embedding and the output head are the model's own. They are
    trained (their loss is added) and not run at inference.

    Group-limited routing (MoE): the ``experts`` form ``expert_groups``
    groups and a token's ``top_k`` experts come from at most
    ``group_top_k`` of them (DeepSeek's ``n_group`` / ``topk_group``);
    ``router_score`` is the gate's scoring function (softmax or sigmoid),
    ``routed_scale`` the factor the routed experts' combined output is
    multiplied by (``routed_scaling_factor``: DeepSeek-V3 2.5, Kimi-K2 2.827;
    no parameters, no cost).

    ``block_norms`` counts the norms of a block (2; 4 for Gemma 2/3 and
    GLM-4 "sandwich" blocks); ``qk_norm_dim`` the width of each QK-norm
    (0: over all heads, ``attn_dim``; ``head_dim`` for per-head norms);
    ``extra_params`` are parameters the shape fields do not describe (gates,
    tile position embeddings, unused embeddings, small norms and biases),
    counted before the first block, with no FLOPs; ``tiles`` tiles of one
    image attend jointly (mllama). ``window`` > 0: the layers not in
    ``full_layers`` attend to ``window`` keys per query (a sliding window in
    a causal decoder, Gemma 2/3; non-overlapping windows of that many
    patches in a vision encoder, Qwen2.5-VL).

    References
    ----------
    .. [40] DeepSeek-AI, "DeepSeek-V2: A Strong, Economical, and Efficient
       Mixture-of-Experts Language Model", arXiv:2405.04434 (2024), Section
       2.1 (multi-head latent attention, Equations 9-19).
    .. [41] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437
       (2024), Section 2.1 (MLA, node-limited routing) and Section 2.2
       (multi-token prediction).
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
    rotary: bool | None = None  # rotary position embeddings on Q, K (None: by kind -- a vit with pos_embed none, every other)
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
    proj_bias: bool = True  # the projector's linears carry biases
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
    # mixture of experts
    experts: int = 0
    top_k: int = 0
    moe_ffn: int = 0
    shared_ffn: int = 0
    first_dense: int = 0
    moe_every: int = 1
    dense_layers: tuple[int, ...] = ()
    norm_topk: bool = False
    # other block variants
    cross_layers: tuple[int, ...] = ()
    cross_tokens: int = 0
    block_norms: int = 2
    qk_norm_dim: int = 0
    extra_params: int = 0
    tiles: int = 1
    window: int = 0  # windowed attention: keys per query in the layers not in full_layers (0: full everywhere)
    full_layers: tuple[int, ...] = ()
    # multi-head latent attention (kv_lora_rank > 0) and multi-token prediction
    q_lora_rank: int = 0  # query down-projection width (0: one projection hidden -> heads x qk_head_dim)
    kv_lora_rank: int = 0  # key/value latent width (0: standard attention)
    rope_head_dim: int = 0  # decoupled rotary width per head of the query and the shared key
    v_head_dim: int = 0  # value width per head (0: head_dim)
    mtp_layers: int = 0  # multi-token prediction modules after the last block (trained, not run at inference)
    expert_groups: int = 0  # group-limited routing: the experts form this many groups (0: no groups)
    group_top_k: int = 0  # ... and a token's experts come from at most this many of them
    router_score: str = "softmax"  # the router's scoring function: softmax | sigmoid
    routed_scale: float = 1.0  # the routed experts' weights times this (routed_scaling_factor; no parameters)
    deepstack: int = 0  # projector: DeepStack mergers whose outputs are added to the first LLM layers (Qwen3-VL)
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
    def mla(self) -> bool:
        """Whether the attention is multi-head latent attention (``kv_lora_rank`` > 0)."""
        return self.kv_lora_rank > 0

    @property
    def qk_head_dim(self) -> int:
        """Width of one head's query and key: ``head_dim``, plus ``rope_head_dim`` with MLA."""
        return self.d_head + (self.rope_head_dim if self.mla else 0)

    @property
    def v_dim(self) -> int:
        """Width of one head's value (and of its share of the output projection's input)."""
        return self.v_head_dim or self.d_head

    @property
    def patches_per_image(self) -> int:
        return (self.image_size // self.patch) ** 2

    @property
    def patches_per_clip(self) -> int:
        """Patch tokens of one image (all its ``tiles``), or of one video clip of ``frames`` frames (``temporal_patch`` frames per patch)."""
        return self.patches_per_image * max(1, self.frames // self.temporal_patch) * self.tiles

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
        """Image tokens per sample entering the language model's sequence (the projectors' output).

        None for a language model that reads them through cross-attention
        (its ``cross_tokens``, mllama).
        """
        llm = self.llm
        if llm is not None and llm.cross_layers:
            return 0
        return sum(m.tokens for m in self.of_kind("projector"))

    @property
    def llm_tokens(self) -> int:
        """Sequence length of the language model per sample."""
        llm = self.llm
        return self.image_tokens + (llm.text_tokens if llm else 0)

    @property
    def params(self) -> int:
        return sum(module_params(m) for m in self.modules)

    @property
    def active_params(self) -> int:
        """Parameters one token runs through: all of them, less the routed experts a MoE layer does not pick."""
        return sum(module_active_params(m) for m in self.modules)

    def summary(self) -> dict[str, Any]:
        """``{"name", "params", "modules": [{"name", "kind", "layers", "params"}]}`` (CLI ``models --json``)."""
        doc: dict[str, Any] = {
            "name": self.name,
            "params": self.params,
            "modules": [
                {"name": m.name, "kind": m.kind, "layers": m.layers, "params": module_params(m)} for m in self.modules
            ],
        }
        for entry, m in zip(doc["modules"], self.modules):
            if m.mtp_layers:  # multi-token prediction modules: in the module's params, trained only
                entry["mtp_layers"] = m.mtp_layers
                entry["mtp_params"] = module_layer_params(m)["mtp"]
        if any(m.experts for m in self.modules):
            doc["active_params"] = self.active_params
            for entry, m in zip(doc["modules"], self.modules):
                entry["active_params"] = module_active_params(m)
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
    hbm_GBps: float | None = None  # HBM bandwidth per GPU (memory-bound kernels); None: not given
    peak_tflops_fp8: float | None = None  # dense FP8 tensor-core peak per GPU, where the GPU has one
    # the stage sizes allowed inside a node when a job uses part of the cluster (plan --gpus): the
    # problem's cluster.stage_sizes (DESIGN.md "Partial racks"); None: rule 3's powers of two
    stage_sizes: tuple[int, ...] | None = None
    gpu: str = ""
    title: str = ""
    references: Mapping[str, str] = field(default_factory=dict)
    source: str | None = field(default=None, compare=False)
    generation: str = ""  # one of GPU_GENERATIONS; "": implied by ``gpu`` (:func:`gpu_generation`)
    # the network above the nodes (DESIGN.md "Network levels"): the problem's cluster.levels; None: one flat network
    levels: tuple[Level, ...] | None = None

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpu": self.gpu,
            "gpus_per_node": self.gpus_per_node,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "peak_tflops": self.peak_tflops,
            "intra_node_GBps": self.intra_node_GBps,
            "inter_node_GBps": self.inter_node_GBps,
            "hbm_GBps": self.hbm_GBps,
            "peak_tflops_fp8": self.peak_tflops_fp8,
            "generation": gpu_generation(self),
            **({"stage_sizes": list(self.stage_sizes)} if self.stage_sizes is not None else {}),
            **({"levels": [level_doc(v) for v in self.levels]} if self.levels is not None else {}),
        }


def gpu_generation(cluster: ClusterSpec) -> str:
    """The GPU generation of ``cluster``: its ``generation``, else the first of :data:`GPU_GENERATIONS` whose
    name (A100/A800, H100/H800, H200, B200/B100, GB200) its ``gpu`` contains, else ``a100`` (the constants
    the cost model was first calibrated with)."""
    if cluster.generation:
        return cluster.generation
    gpu = cluster.gpu.upper()
    for name, marks in _GPU_MARKS:
        if any(mark in gpu for mark in marks):
            return name
    return "a100"


# --------------------------------------------------------------------------- parameter counts


def _norm_params(spec: ModuleSpec, width: int) -> int:
    return 2 * width if spec.norm == "layernorm" else width


def _linear(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


def is_moe_layer(spec: ModuleSpec, i: int) -> bool:
    """Whether block ``i`` of ``spec`` has routed experts (see :class:`ModuleSpec`)."""
    return (spec.experts > 0 and i >= spec.first_dense and i not in spec.dense_layers
            and (i + 1) % max(1, spec.moe_every) == 0)


def is_cross_layer(spec: ModuleSpec, i: int) -> bool:
    """Whether block ``i`` of ``spec`` is a cross-attention layer (mllama)."""
    return i in spec.cross_layers


def _mlp_params(spec: ModuleSpec, width: int) -> int:
    n_in = 2 if spec.gated else 1
    return n_in * _linear(spec.hidden, width, spec.bias) + _linear(width, spec.hidden, spec.bias)


def _expert_params(spec: ModuleSpec) -> int:
    """One routed expert (no biases: Qwen3-MoE, GLM-4.5 and Megatron's grouped GEMM carry none)."""
    return (3 if spec.gated else 2) * spec.hidden * spec.moe_ffn


def mla_down_params(spec: ModuleSpec) -> int:
    """Parameters of an MLA block's down-projections: ``hidden -> q_lora_rank`` (when it has one) and
    ``hidden -> kv_lora_rank + rope_head_dim`` [40]_ (Megatron-Core holds them whole on every tensor-parallel rank).

    References
    ----------
    .. [40] As cited in :class:`ModuleSpec`.
    """
    bias = bool(spec.qkv_bias)
    q = _linear(spec.hidden, spec.q_lora_rank, bias) if spec.q_lora_rank else 0
    return q + _linear(spec.hidden, spec.kv_lora_rank + spec.rope_head_dim, bias)


def _mla_attention_params(spec: ModuleSpec) -> int:
    """Multi-head latent attention [40]_: the down-projections, the latent norms, the up-projections
    (queries ``heads x qk_head_dim``; non-rotary keys and values ``heads x (head_dim + v_head_dim)``) and the
    output projection ``heads x v_head_dim -> hidden`` (transformers' ``DeepseekV3Attention``).

    References
    ----------
    .. [40] As cited in :class:`ModuleSpec`.
    """
    h, a, r_q, r_kv = spec.hidden, spec.heads, spec.q_lora_rank, spec.kv_lora_rank
    p = mla_down_params(spec) + _norm_params(spec, r_kv) + _linear(r_kv, a * (spec.d_head + spec.v_dim), False)
    if r_q:
        p += _norm_params(spec, r_q) + _linear(r_q, a * spec.qk_head_dim, False)
    else:
        p += _linear(h, a * spec.qk_head_dim, False)
    return p + _linear(a * spec.v_dim, h, bool(spec.qkv_bias))


def _attention_params(spec: ModuleSpec, cross: bool) -> int:
    h = spec.hidden
    if spec.mla:
        return _mla_attention_params(spec)
    qkv_bias = spec.bias if spec.qkv_bias is None else spec.qkv_bias
    p = _linear(h, spec.attn_dim + 2 * spec.kv_dim, qkv_bias) + _linear(spec.attn_dim, h, spec.bias)
    if spec.qk_norm or cross:
        width_q = spec.qk_norm_dim or spec.attn_dim
        width_k = spec.qk_norm_dim or spec.attn_dim
        p += _norm_params(spec, width_q) + _norm_params(spec, width_k)
    if cross:
        p += 2  # tanh gates of the attention and MLP branches (mllama)
    return p


def layer_block_params(spec: ModuleSpec, i: int | None = None) -> int:
    """Parameters of block ``i`` of ``spec`` (``None``: a dense self-attention block).

    Attention (self, or cross for ``cross_layers``), the MLP (dense, or the
    router, ``experts`` routed experts and the shared MLP in a MoE layer),
    ``block_norms`` norms, layer scales and QK-norms.
    """
    h = spec.hidden
    cross = i is not None and is_cross_layer(spec, i)
    p = _attention_params(spec, cross)
    if i is not None and is_moe_layer(spec, i):
        p += h * spec.experts + spec.experts * _expert_params(spec)
        if spec.shared_ffn:
            p += _mlp_params(spec, spec.shared_ffn)
    else:
        p += _mlp_params(spec, spec.ffn)
    p += spec.block_norms * _norm_params(spec, h)
    if spec.layerscale:
        p += 2 * h
    return p


def layer_active_params(spec: ModuleSpec, i: int) -> int:
    """Parameters of block ``i`` one token runs through: a MoE layer counts ``top_k`` of its routed experts."""
    p = layer_block_params(spec, i)
    if is_moe_layer(spec, i):
        p -= (spec.experts - spec.top_k) * _expert_params(spec)
    return p


def mtp_block_index(spec: ModuleSpec) -> int:
    """The block index whose kind (dense or MoE) a multi-token prediction module's block takes: the last one."""
    return spec.layers - 1


def mtp_layer_params(spec: ModuleSpec, active: bool = False) -> int:
    """Parameters of one multi-token prediction module [41]_ (``active``: as one token runs through it).

    The norms of the embedding and of the hidden state, the projection
    ``2 hidden -> hidden`` (no bias), one block like the last one and the
    norm before the shared output head; the embedding and the head are the
    model's (transformers' ``MtpLayer``, Megatron-Core's
    ``MultiTokenPredictionLayer``).

    References
    ----------
    .. [41] As cited in :class:`ModuleSpec`.
    """
    block = layer_active_params if active else layer_block_params
    return 3 * _norm_params(spec, spec.hidden) + _linear(2 * spec.hidden, spec.hidden, False) + block(spec, mtp_block_index(spec))


def block_params(spec: ModuleSpec) -> int:
    """Parameters of one dense self-attention transformer block of ``spec`` (vit, llm, action expert or head)."""
    return layer_block_params(spec, None)


def module_layer_params(spec: ModuleSpec) -> dict[str, int]:
    """Parameters by part: ``pre`` (before the first block), ``block`` (each), ``post`` (after the last).

    For an ``llm``, ``pre`` is the token embedding and ``post`` the final
    norm plus an untied LM head, and ``mtp`` its multi-token prediction
    modules (0 without); for a projector everything is ``pre``.
    """
    k = spec.kind
    if k == "projector":
        # DeepStack mergers normalise after the 2 x 2 merge: their norm is over in_dim (Qwen3-VL)
        stacks = spec.deepstack * _projector_params(replace(spec, pre_norm_dim=spec.in_dim)) if spec.deepstack else 0
        return {"pre": _projector_params(spec) + stacks + spec.extra_params, "block": 0, "post": 0}
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
        pre += spec.extra_params
        if spec.pool_head:  # probe, attention (in + out projections with biases), norm, MLP
            post += h + (3 * h * h + 3 * h) + (h * h + h) + 2 * h + _linear(h, spec.ffn, True) + _linear(spec.ffn, h, True)
        return {"pre": pre, "block": block, "post": post}
    if k == "llm":
        pre = spec.vocab * h + spec.extra_params
        if spec.rotary is False:  # learned absolute positions (GPT-2/3), one per position of the context
            pre += (spec.pos_tokens or spec.text_tokens) * h
        if spec.lm_head and not spec.tie_embeddings:
            post += spec.vocab * h
        mtp = spec.mtp_layers * mtp_layer_params(spec) if spec.mtp_layers else 0
        return {"pre": pre, "block": block, "post": post, "mtp": mtp}
    if k == "action_expert":
        # pi0: state and noisy-action projections, the time MLP (in), the action output projection (out)
        pre = _linear(spec.state_dim, h, True) + _linear(spec.action_dim, h, True)
        pre += _linear(2 * h, h, True) + _linear(h, h, True) + spec.extra_params
        post += _linear(h, spec.action_dim, True)
        return {"pre": pre, "block": block, "post": post}
    if k == "action_head":
        pre = _linear(spec.cond_dim, h, True) + _linear(spec.action_dim, h, True)
        post += _linear(h, spec.action_dim, True)
        return {"pre": pre, "block": block, "post": post}
    raise ValueError(f"unknown module kind {k!r}")


def _projector_params(spec: ModuleSpec) -> int:
    """One merger: its norm (over ``pre_norm_dim``), linears ``in_dim -> dims...`` (biases when ``proj_bias``),
    the last hidden width doubled for a gated MLP (gate and up projections)."""
    bias = spec.proj_bias
    p = _norm_params(spec, spec.pre_norm_dim) if spec.pre_norm_dim else 0
    dims = (spec.in_dim, *spec.dims)
    for j, (a, b) in enumerate(zip(dims, dims[1:])):
        p += (2 if spec.gated and j == len(dims) - 3 else 1) * _linear(a, b, bias)
    return p


def module_params(spec: ModuleSpec) -> int:
    """Total parameters of a module, counted from its shapes (multi-token prediction modules included)."""
    parts = module_layer_params(spec)
    if spec.kind == "projector":
        return parts["pre"]
    return parts["pre"] + sum(layer_block_params(spec, i) for i in range(spec.layers)) + parts["post"] + parts.get("mtp", 0)


def module_active_params(spec: ModuleSpec) -> int:
    """Parameters of a module one token runs through (:func:`layer_active_params` per block)."""
    parts = module_layer_params(spec)
    if spec.kind == "projector":
        return parts["pre"]
    mtp = spec.mtp_layers * mtp_layer_params(spec, active=True) if spec.mtp_layers else 0
    return parts["pre"] + sum(layer_active_params(spec, i) for i in range(spec.layers)) + parts["post"] + mtp



def with_module(model: ModelSpec, name: str, **changes: Any) -> ModelSpec:
    """A copy of ``model`` with fields of module ``name`` changed (e.g. ``frozen=True``)."""
    return replace(model, modules=tuple(replace(m, **changes) if m.name == name else m for m in model.modules))

