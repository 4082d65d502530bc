"""A model spec cut into pipeline layers, each a list of per-sample matmul pieces.

Contract: :func:`model_layers` turns a :class:`~partitioner.presets.ModelSpec`
into :class:`PipelineLayer` s in execution order -- one per transformer
block, plus the projector, the token embedding, a language model's
multi-token prediction modules (role ``mtp``, between its last block and
its head) and the LM head (pi0 fuses LLM block i with action-expert
block i). Each layer holds
:class:`Piece` s with the per-sample forward FLOPs, parameters, token and
width of its matmuls, what its activations are counted from, and the bf16
tensor (per sample) the next layer needs. Layouts, batch sizes and times
are not known here (:mod:`.entry` and :mod:`.build` add them).

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.layers``.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ..presets import (
    ModelSpec,
    ModuleSpec,
    is_cross_layer,
    is_moe_layer,
    layer_block_params,
    module_layer_params,
    mtp_block_index,
)
from ..problem import ProblemError
from .attention.mla import mla_gemms, mla_replicated, mla_shape, mla_tp_comm_width
from .axes.experts import router_flops
from .compute.flops import attn_flops as _attn_flops
from .compute.flops import block_gemm_flops as _block_gemm_flops
from .compute.precision import block_fp8_weights
from .memory.activations import BlockShape
from .options import BF16_BYTES, CostOptions

__all__ = ["MoeShape", "Piece", "PipelineLayer", "model_layers", "block_shape"]


@dataclass(frozen=True)
class MoeShape:
    """The routed experts of a MoE block: ``experts`` of width ``moe_ffn``, ``top_k`` per token.

    ``params`` are all routed experts' parameters (in the piece's
    ``params``); the router and the shared MLP (``shared_ffn`` wide) are
    dense parts of the piece.
    """

    experts: int
    top_k: int
    moe_ffn: int
    shared_ffn: int
    gated: bool
    params: int


@dataclass(frozen=True)
class Piece:
    """One matmul group inside a pipeline layer, per training sample.

    ``gemm_flops`` are the forward FLOPs of weighted matmuls, ``attn_flops``
    those of the attention core (scores and values). A ``block`` piece has
    Korthikanti activations over ``tokens x width`` with ``heads`` heads and
    ``attn_pairs`` query-key pairs; a ``dense`` piece stores
    ``dense_act`` bytes per sample (split into the part sequence
    parallelism shards and the part tp shards anyway).
    """

    name: str
    module: str
    kind: str  # block | dense
    gemm_flops: float
    attn_flops: float
    params: int
    tokens: float  # per sample (a context-parallel rank's share need not be whole)
    width: int
    heads: int = 1
    attn_pairs: float = 0.0  # query-key pairs computed (the causal half for causal attention)
    score_entries: float = 0.0  # score-matrix entries per head stored without flash attention (masked ones too)
    allreduces: int = 0  # forward collectives over tokens x width (as many again in backward)
    dense_act: tuple[float, float] = (0.0, 0.0)  # (replicated without SP, always sharded) bytes per sample
    tp_dims: tuple[int, ...] = ()  # dimensions tp must divide
    frozen: bool = False
    backward: bool = True  # False: a frozen module with nothing trainable before it
    passes: int = 1
    shape: BlockShape | None = None  # a block's dimensions (its activations)
    input_gemm_flops: float = 0.0  # forward FLOPs of the matmul that reads the piece's input
    needs_input_grad: bool = True  # False: nothing before it needs a gradient (that matmul's input gradient is skipped)
    bwd_gemm_flops: float | None = None  # forward FLOPs of the weighted matmuls a backward runs through (None: all)
    bwd_attn_flops: float | None = None  # the same for the attention core
    dead: bool = False  # runs forward but its output is unused: no backward, nothing kept
    tied_params: int = 0  # a tied LM head's own copy of the embedding: weight memory, not model parameters
    op: str = ""  # a dense piece's memory-bound work (.traffic): embedding | head | projector
    vocab: int = 0  # embedding and head: the vocabulary
    dims: tuple[int, ...] = ()  # projector: its widths
    positions: bool = False  # embedding: a learned position embedding is added
    dropout: bool = False  # embedding: dropout after it
    mask: str = ""  # a block's attention: causal | bidirectional | window | cross (what context parallelism can split)
    moe: MoeShape | None = None  # a MoE block's routed experts (what expert parallelism splits)
    replicated_params: int = 0  # of params, those every tp rank holds whole (MLA's down-projections)
    replicated_gemm_flops: float = 0.0  # of gemm_flops, those every tp rank runs whole without sequence parallelism
    attn_comm_width: float = 0.0  # the attention's tp collectives as a width per token (0: width; MLA: its latents)
    bf16_gemm_flops: float = 0.0  # a block's weighted-matmul FLOPs that stay BF16 under FP8 (router, patch embedding...)
    bf16_params: int = 0  # a block's parameters outside its FP8 linears (norms, biases, router, extras)


@dataclass(frozen=True)
class PipelineLayer:
    """One problem layer: its pieces, the bf16 tensor it hands on (per sample) and export hints."""

    name: str
    module: str
    role: str  # vision | projector | embedding | decoder | loss | action
    pieces: tuple[Piece, ...]
    out_bytes_per_sample: float
    fqns: tuple[str, ...] = ()

    @property
    def params(self) -> int:
        return sum(p.params for p in self.pieces)


def _block_piece(
    spec: ModuleSpec, name: str, tokens: int, pairs: float, extra_params: int = 0, extra_flops: float = 0.0, passes: int = 1,
    scores: float | None = None, input_flops: float | None = None, i: int | None = None, mask: str = "bidirectional",
) -> Piece:
    moe = i is not None and is_moe_layer(spec, i)
    cross = i is not None and is_cross_layer(spec, i)
    # activations of a MoE layer: its k routed experts and the shared MLP act as one MLP of their summed width
    ffn = spec.top_k * spec.moe_ffn + spec.shared_ffn if moe else spec.ffn
    shape_spec = replace(spec, ffn=ffn) if moe else spec
    # multi-head latent attention: the down-projections are whole on every tp rank, the latents are gathered
    repl_params, repl_flops = mla_replicated(spec, tokens) if spec.mla else (0, 0.0)
    params = layer_block_params(spec, i) + extra_params
    # what stays BF16 under FP8 (.precision): the router and the extras (patch embedding, pooling head, action
    # projections); the parameters outside the block's linear layers (norms, biases, router, extras)
    router = router_flops(tokens, spec.hidden, spec.experts) if moe else 0.0
    return Piece(
        name=name,
        module=spec.name,
        kind="block",
        gemm_flops=passes * (_block_gemm_flops(spec, tokens, i) + extra_flops),
        attn_flops=passes * _attn_flops(spec, pairs),
        params=params,
        tokens=tokens,
        width=spec.hidden,
        heads=spec.heads,
        attn_pairs=pairs,
        score_entries=pairs if scores is None else scores,
        allreduces=2,
        tp_dims=(spec.heads, spec.hidden, spec.moe_ffn if moe else spec.ffn) + ((spec.shared_ffn,) if moe and spec.shared_ffn else ()),
        frozen=spec.frozen,
        passes=passes,
        shape=block_shape(shape_spec, tokens, pairs if scores is None else scores),
        input_gemm_flops=passes * (input_flops if input_flops is not None else
                                   (2.0 * tokens * spec.hidden * spec.attn_dim if cross else _qkv_flops(spec, tokens))),
        mask="cross" if cross else mask,
        moe=MoeShape(spec.experts, spec.top_k, spec.moe_ffn, spec.shared_ffn, spec.gated,
                     spec.experts * (3 if spec.gated else 2) * spec.hidden * spec.moe_ffn) if moe else None,
        replicated_params=repl_params,
        replicated_gemm_flops=passes * repl_flops,
        attn_comm_width=mla_tp_comm_width(spec) if spec.mla else 0.0,
        bf16_gemm_flops=passes * (router + extra_flops),
        bf16_params=max(0, params - int(round(block_fp8_weights(spec, i)))),
    )


def _mtp_layers(spec: ModuleSpec, s: int, pairs: float) -> list[PipelineLayer]:
    """The multi-token prediction modules of ``spec`` as pipeline layers of their own, after the last block.

    Module j (DeepSeek-V3 [41]_ Section 2.2; Megatron-Core's
    ``MultiTokenPredictionLayer`` [43]_) looks up the embedding of the
    tokens shifted by j + 1 (the model's embedding: a copy on its stage,
    ``tied_params``, tied to the embedding layer like a tied head), norms
    it and the previous depth's hidden state, projects their concatenation
    ``2 h -> h``, runs one block like the last one and a norm. The shared
    output head scores each module's sequence too (the head's tokens are
    ``(1 + mtp_layers) s``), so module j hands on the main hidden state and
    j + 1 MTP states. Kept for backward beyond the block: the two norms'
    inputs, the projection's input (``2 h``) and the final norm's input,
    ``5 s h`` bf16 elements per sample (replicated over tp unless sequence
    parallelism shards them).

    References
    ----------
    .. [41] DeepSeek-AI, "DeepSeek-V3 Technical Report", arXiv:2412.19437
       (2024), Section 2.2 (multi-token prediction).
    .. [43] NVIDIA Megatron-Core 0.16.1, ``megatron/core/transformer/
       multi_token_prediction.py`` (``MultiTokenPredictionLayer``; all MTP
       layers on the last pipeline stage unless a custom layout places them)
       and ``models/gpt/gpt_model.py`` (the output layer over the main and
       the MTP hidden states).
    """
    h, V = spec.hidden, spec.vocab
    i = mtp_block_index(spec)
    proj_params = module_layer_params(replace(spec, mtp_layers=1))["mtp"] - layer_block_params(spec, i)
    proj_flops = 2.0 * s * 2 * h * h
    out = []
    for j in range(spec.mtp_layers):
        name = f"{spec.name}.mtp.{j}"
        embed = Piece(name=f"{name}.embed", module=spec.name, kind="dense", gemm_flops=0.0, attn_flops=0.0, params=0,
                      tied_params=V * h, tokens=s, width=h, allreduces=1, frozen=spec.frozen, op="embedding", vocab=V,
                      dropout=spec.dropout)
        proj = Piece(name=f"{name}.proj", module=spec.name, kind="dense", gemm_flops=proj_flops, attn_flops=0.0,
                     params=proj_params, tokens=s, width=h, allreduces=1, dense_act=(5 * BF16_BYTES * s * h, 0.0),
                     tp_dims=(h,), frozen=spec.frozen, input_gemm_flops=proj_flops)
        block = _block_piece(spec, f"{name}.block", s, pairs, i=i, mask="causal")
        fq = _fqn(spec, "mtp", spec.layers + j)
        out.append(PipelineLayer(name, spec.name, "mtp", (embed, proj, block), (2 + j) * s * h * BF16_BYTES, fq))
    return out


def _causal_pairs(s: float, window: int = 0) -> float:
    """Query-key pairs of causal attention over ``s`` tokens, each query seeing at most ``window`` keys (0: all)."""
    if window <= 0 or window >= s:
        return s * (s + 1) / 2.0
    return window * (window + 1) / 2.0 + (s - window) * window


def _windowed(spec: ModuleSpec, i: int) -> bool:
    return spec.window > 0 and i not in spec.full_layers


def _pool_head_flops(spec: ModuleSpec) -> float:
    """Forward FLOPs per image of SigLIP's attention-pooling head: one probe query over the patches [11]_.

    Keys and values of every patch (2 h^2 each), the probe's query, scores
    and values (4 h per patch), output projection and MLP on one token.

    References
    ----------
    .. [11] X. Zhai et al., "Sigmoid Loss for Language Image Pre-Training",
       ICCV 2023 (the MAP attention-pooling head of SigLIP's vision tower).
    """
    h, t = spec.hidden, spec.patches_per_image
    return 2.0 * t * 2 * h * h + 4.0 * h * t + 2.0 * (2 * h * h + 2 * h * spec.ffn)


def _qkv_flops(spec: ModuleSpec, tokens: float) -> float:
    """Forward FLOPs of a block's QKV projection (the matmul that reads the block input; MLA: its down-projections)."""
    if spec.mla:
        return 2.0 * tokens * mla_gemms(spec).reads_input
    return 2.0 * tokens * spec.hidden * (spec.attn_dim + 2 * spec.kv_dim)


def block_shape(spec: ModuleSpec, tokens: float, score_entries: float | None = None) -> BlockShape:
    """The :class:`~.memory.activations.BlockShape` of one block of ``spec`` over ``tokens`` tokens per sample
    (multi-head latent attention: query/key heads of ``qk_head_dim``, :func:`~.attention.mla.mla_shape`)."""
    return BlockShape(
        tokens=tokens,
        hidden=spec.hidden,
        heads=spec.heads,
        kv_heads=spec.n_kv_heads,
        head_dim=spec.qk_head_dim if spec.mla else spec.d_head,
        ffn=spec.ffn,
        gated=spec.gated,
        norm=spec.norm,
        activation=spec.activation,
        layerscale=spec.layerscale,
        qk_norm=spec.qk_norm,
        dropout=spec.dropout,
        fused_qkv=spec.fused_qkv,
        rotary=spec.rotary if spec.rotary is not None else (spec.kind != "vit" or spec.pos_embed == "none"),
        score_entries=score_entries,
        mla=mla_shape(spec),
    )


def _fqn(spec: ModuleSpec, part: str, i: int | None = None) -> tuple[str, ...]:
    value = spec.fqn.get(part) if spec.fqn else None
    if value is None:
        return ()
    if isinstance(value, str):
        return (value.format(i=i),) if i is not None else (value,)
    return tuple(str(v) for v in value)


def model_layers(model: ModelSpec, options: CostOptions | None = None) -> list[PipelineLayer]:
    """Cut ``model`` into pipeline layers, in execution order, with per-sample pieces."""
    opts = options or CostOptions()
    frozen = {m.name: (m.frozen or m.name in opts.freeze) and m.name not in opts.train for m in model.modules}
    modules = [replace(m, frozen=frozen[m.name]) for m in model.modules]
    for name in (*opts.freeze, *opts.train):
        if name not in frozen:
            raise ProblemError(f"model {model.name} has no module {name!r} (modules: {', '.join(frozen)})", path="options.freeze")
    if opts.text_tokens is not None:
        modules = [replace(m, text_tokens=opts.text_tokens) if m.kind == "llm" else m for m in modules]
    model = replace(model, modules=tuple(modules))

    if model.image_tokens and model.llm is None:
        raise ProblemError(f"model {model.name}: a projector without a language model is not supported")
    vits = [m for m in modules if m.kind == "vit"]
    expert = next((m for m in modules if m.kind == "action_expert"), None)
    layers: list[PipelineLayer] = []
    s_llm = model.llm_tokens

    for spec in modules:
        parts = module_layer_params(spec)
        if spec.kind == "vit":
            tpi, n = spec.tokens_per_image, spec.images
            tokens = n * tpi
            pairs = float(n * tpi * tpi)  # bidirectional, per image (or video clip)
            patch_flops = 2.0 * n * spec.patches_per_clip * spec.channels * spec.temporal_patch * spec.patch**2 * spec.hidden
            # what travels with this encoder's state: the image for the encoders still to run,
            # the outputs of the encoders already run (fused backbones such as OpenVLA's)
            later = [v for v in vits if vits.index(v) > vits.index(spec)]
            earlier = [v for v in vits if vits.index(v) < vits.index(spec)]
            carry = 0.0
            if later:
                carry += n * spec.channels * spec.image_size**2 * BF16_BYTES
            carry += sum(v.images * (v.output_tokens or v.patches_per_clip) * v.hidden * BF16_BYTES for v in earlier)
            used = spec.layers + 1 + spec.feature_layer  # blocks whose output reaches the features (-1: all)
            for i in range(spec.layers):
                extra_p = (parts["pre"] if i == 0 else 0) + (parts["post"] if i == spec.layers - 1 else 0)
                extra_f = patch_flops if i == 0 else 0.0
                if i == spec.layers - 1 and spec.pool_head:
                    extra_f += n * _pool_head_flops(spec)
                # windowed layers (Qwen2.5-VL): each patch attends within its window of spec.window patches
                layer_pairs = float(n * tpi * min(spec.window, tpi)) if _windowed(spec, i) else pairs
                piece = _block_piece(spec, f"{spec.name}.{i}", tokens, layer_pairs, extra_p, extra_f,
                                     input_flops=patch_flops if i == 0 else None, i=i,
                                     mask="window" if _windowed(spec, i) else "bidirectional")
                if i >= used:  # after the feature layer: runs forward, its weights never get a gradient
                    piece = replace(piece, dead=True, frozen=True)
                fq = (_fqn(spec, "pre") if i == 0 else ()) + _fqn(spec, "block", i) + (_fqn(spec, "post") if i == spec.layers - 1 else ())
                out = tokens * spec.hidden * BF16_BYTES + carry
                if i == spec.layers - 1:
                    out = n * (spec.output_tokens or spec.patches_per_clip) * spec.hidden * BF16_BYTES + carry
                layers.append(PipelineLayer(f"{spec.name}.{i}", spec.name, "vision", (piece,), out, fq))
        elif spec.kind == "projector":
            t = spec.tokens
            dims = (spec.in_dim, *spec.dims)
            copies = 1 + spec.deepstack  # DeepStack mergers: the same shapes over the same tokens (Qwen3-VL)
            doubled = len(dims) - 3 if spec.gated else -1  # a gated MLP's gate and up projections
            gemm = copies * 2.0 * t * sum((2 if j == doubled else 1) * a * b for j, (a, b) in enumerate(zip(dims, dims[1:])))
            # stored per linear: its input; per activation function: its input (as Korthikanti's MLP term)
            sharded = copies * sum(2 * BF16_BYTES * t * d for d in spec.dims[:-1])
            replicated = copies * (BF16_BYTES * t * spec.in_dim + (BF16_BYTES * t * spec.pre_norm_dim if spec.pre_norm_dim else 0))
            piece = Piece(
                name=spec.name,
                module=spec.name,
                kind="dense",
                gemm_flops=gemm,
                attn_flops=0.0,
                params=parts["pre"],
                tokens=t,
                width=min(dims),
                allreduces=max(1, len(spec.dims) // 2),
                dense_act=(replicated, sharded),
                tp_dims=tuple(spec.dims),
                frozen=spec.frozen,
                input_gemm_flops=copies * 2.0 * t * spec.in_dim * spec.dims[0],
                op="projector",
                dims=tuple(spec.dims),
            )
            out = copies * t * spec.out_dim * BF16_BYTES
            layers.append(PipelineLayer(spec.name, spec.name, "projector", (piece,), out, _fqn(spec, "pre")))
        elif spec.kind == "llm":
            h = spec.hidden
            embed = Piece(
                name=f"{spec.name}.embed",
                module=spec.name,
                kind="dense",
                gemm_flops=0.0,
                attn_flops=0.0,
                params=parts["pre"],
                tokens=s_llm,
                width=h,
                allreduces=1,  # vocab-parallel embedding
                frozen=spec.frozen,
                op="embedding",
                vocab=spec.vocab,
                positions=spec.rotary is False,
                dropout=spec.dropout,
            )
            # what travels with the text activations: mllama's vision states up to the last cross-attention layer,
            # Qwen3-VL's DeepStack features up to the layer that adds the last of them
            cross_bytes = spec.cross_tokens * h * BF16_BYTES if spec.cross_layers else 0.0
            last_cross = max(spec.cross_layers) if spec.cross_layers else -1
            stacks = [m for m in modules if m.kind == "projector" and m.deepstack]
            stack_bytes = sum(m.tokens * m.out_dim * BF16_BYTES for m in stacks)
            n_stack = max((m.deepstack for m in stacks), default=0)

            def carried(i: int) -> float:
                """Bytes handed on after llm layer i (-1: the embedding) besides the text activations."""
                extra = cross_bytes if i < last_cross else 0.0
                return extra + stack_bytes * max(0, n_stack - 1 - i)  # layer i adds DeepStack feature i

            layers.append(PipelineLayer(f"{spec.name}.embed", spec.name, "embedding", (embed,), s_llm * h * BF16_BYTES + carried(-1),
                                        _fqn(spec, "pre")[:1]))
            if spec.attention == "causal":
                pairs = s_llm * (s_llm + 1) / 2.0
            else:  # prefix (PaliGemma) or bidirectional: every prefix pair
                pairs = float(s_llm * s_llm)
            e_parts = module_layer_params(expert) if expert else {}  # read only with an expert
            for i in range(spec.layers):
                last = i == spec.layers - 1
                extra_p = parts["post"] if last and not spec.lm_head else 0
                s_all = s_llm + (expert.tokens if expert is not None else 0)
                layer_pairs, scores = pairs, float(s_llm * s_all)
                mask = "causal" if spec.attention == "causal" else "bidirectional"
                if is_cross_layer(spec, i):  # text queries over the vision states
                    layer_pairs = scores = float(s_llm * spec.cross_tokens)
                elif _windowed(spec, i) and spec.attention == "causal":
                    layer_pairs = _causal_pairs(s_llm, spec.window)
                    mask = "window"
                pieces = [_block_piece(spec, f"{spec.name}.{i}", s_llm, layer_pairs, extra_p, scores=scores, i=i,
                                       mask=mask)]
                if last and expert is not None and not spec.lm_head:
                    # the last prefix layer only feeds its keys and values to the expert: the backward
                    # runs through the K and V projections alone
                    kv = 2.0 * s_llm * spec.hidden * 2 * spec.kv_dim
                    pieces[0] = replace(pieces[0], bwd_gemm_flops=kv, bwd_attn_flops=0.0)
                fq = _fqn(spec, "block", i) + (_fqn(spec, "post")[:1] if last and not spec.lm_head else ())
                out = s_llm * h * BF16_BYTES + carried(i)
                if expert is not None:
                    s_e = expert.tokens
                    e_pairs = float(s_e * (s_llm + s_e))  # the suffix attends to the prefix and to itself
                    e_extra = (e_parts["pre"] if i == 0 else 0) + (e_parts["post"] if last else 0)
                    io = 0.0
                    if i == 0:
                        io += 2.0 * s_e * (expert.action_dim * expert.hidden + 2 * expert.hidden * expert.hidden + expert.hidden**2)
                    if last:
                        io += 2.0 * s_e * expert.hidden * expert.action_dim
                    pieces.append(_block_piece(expert, f"{expert.name}.{i}", s_e, e_pairs, e_extra, io, scores=float(s_e * s_all)))
                    fq += (_fqn(expert, "pre") if i == 0 else ()) + _fqn(expert, "block", i) + (_fqn(expert, "post") if last else ())
                    out += s_e * expert.hidden * BF16_BYTES
                edge = opts.fp8_bf16_layers if opts.fp8 else 0
                if i < edge or i >= spec.layers - edge:  # Megatron's first_last_layers_bf16: the whole block in BF16
                    pieces = [replace(pc, bf16_gemm_flops=pc.gemm_flops, bf16_params=pc.params) for pc in pieces]
                layers.append(PipelineLayer(f"{spec.name}.{i}", spec.name if expert is None else f"{spec.name}+{expert.name}", "decoder", tuple(pieces), out, fq))
            if spec.mtp_layers:
                layers.extend(_mtp_layers(spec, s_llm, pairs))
            if spec.lm_head:
                V = spec.vocab
                s_head = s_llm * (1 + spec.mtp_layers)  # the shared head also scores each MTP module's sequence
                head = Piece(
                    name=f"{spec.name}.head",
                    module=spec.name,
                    kind="dense",
                    gemm_flops=2.0 * s_head * h * V,
                    attn_flops=0.0,
                    params=parts["post"],  # a tied head's weights are the embedding's: in the model's parameters once
                    tied_params=V * h if spec.tie_embeddings else 0,
                    tokens=s_head,
                    width=h,
                    allreduces=1,
                    # Korthikanti Sec. 4.3: the output norm and projection inputs, fp32 logits for the loss
                    dense_act=(BF16_BYTES * s_head * h, 4.0 * s_head * V),
                    frozen=spec.frozen,
                    op="head",
                    vocab=V,
                )
                layers.append(PipelineLayer(f"{spec.name}.head", spec.name, "loss", (head,), 0.0, _fqn(spec, "post")))
        elif spec.kind == "action_head":
            t = spec.tokens + spec.cond_tokens
            pairs = float(t * t)
            for i in range(spec.layers):
                last = i == spec.layers - 1
                extra_p = (parts["pre"] if i == 0 else 0) + (parts["post"] if last else 0)
                extra_f = 0.0
                if i == 0:
                    extra_f += 2.0 * (spec.cond_tokens * spec.cond_dim * spec.hidden + spec.tokens * spec.action_dim * spec.hidden)
                if last:
                    extra_f += 2.0 * spec.tokens * spec.hidden * spec.action_dim
                piece = _block_piece(spec, f"{spec.name}.{i}", t, pairs, extra_p, extra_f, passes=spec.passes)
                fq = (_fqn(spec, "pre") if i == 0 else ()) + _fqn(spec, "block", i) + (_fqn(spec, "post") if last else ())
                out = 0.0 if last else spec.passes * t * spec.hidden * BF16_BYTES
                layers.append(PipelineLayer(f"{spec.name}.{i}", spec.name, "action", (piece,), out, fq))
        elif spec.kind == "action_expert":
            continue  # fused into the llm's layers above
    # frozen modules with nothing trainable before them run no backward at all, and the first
    # trainable piece computes no gradient for its input (nothing before it needs one)
    trainable_seen = False
    result = []
    for layer in layers:
        pieces = []
        for piece in layer.pieces:
            first = not piece.frozen and not trainable_seen
            if not piece.frozen:
                trainable_seen = True
            backward = (trainable_seen or not piece.frozen) and not piece.dead
            pieces.append(replace(piece, backward=backward, needs_input_grad=not first))
        result.append(replace(layer, pieces=tuple(pieces)))
    return result

