"""Activation memory of a transformer block, counted from its own shapes.

Contract: :func:`block_activation_terms` returns, for a block described by
:class:`BlockShape`, the bytes its backward pass keeps per microbatch on
one GPU, one named term per tensor (a :class:`dict` in execution order);
:func:`block_activation_bytes` is their sum. Pure arithmetic.

What a block keeps (bf16 tensors, 2 B per element; dropout masks 1 B;
``s`` tokens and ``b`` samples, width ``h``, ``a`` query heads and ``k``
key/value heads of ``d`` channels, MLP width ``f``). The names and the
GPT-3 count are those of Korthikanti et al. [2], Section 4.1:

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.memory.activations``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..attention.mla import MlaShape, mla_activation_terms

__all__ = ["BlockShape", "block_activation_terms", "block_activation_bytes", "COMPOSITE_ACTIVATIONS"]

BF16 = 2.0
FP32 = 4.0
MASK = 1.0

# activation functions that autograd records as several ops, each keeping a tensor of width ffn:
# quick_gelu = x * sigmoid(1.702 x) keeps x and the sigmoid (transformers' QuickGELUActivation)
COMPOSITE_ACTIVATIONS = {"quick_gelu": 2}


@dataclass(frozen=True)
class BlockShape:
    """The dimensions of one transformer block that decide what its backward keeps.

    Parameters
    ----------
    tokens : float
        Tokens per sample ``s``.
    hidden, heads, kv_heads, head_dim, ffn : int
        Width ``h``, query heads ``a``, key/value heads ``k``, channels per
        head ``d``, MLP width ``f``.
    gated : bool
        Gated MLP (SwiGLU / GeGLU): gate, up, act(gate) and product.
    norm : {"layernorm", "rmsnorm"}
    activation : str
        The MLP activation (``quick_gelu`` keeps two tensors, others one).
    layerscale, qk_norm, dropout : bool
    fused_qkv : bool
        One QKV projection whose output V is a view of.
    rotary : bool
        Rotary position embeddings applied to Q and K.
    score_entries : float or None
        Score-matrix entries per head and sample (default ``tokens**2``).
    mla : MlaShape or None
        Multi-head latent attention (:mod:`~partitioner.costs.attention.mla`): ``head_dim`` is
        then the query/key width ``d_qk``, ``kv_heads`` the heads, values
        and the output projection's input ``mla.v_head_dim`` wide, and the
        latents' norm inputs and outputs are kept (``q_latent``,
        ``kv_latent``).
    """

    tokens: float
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    gated: bool = False
    norm: str = "layernorm"
    activation: str = "gelu"
    layerscale: bool = False
    qk_norm: bool = False
    dropout: bool = False
    fused_qkv: bool = False
    rotary: bool = False
    score_entries: float | None = None
    mla: MlaShape | None = None

    @classmethod
    def gpt3(cls, tokens: float, hidden: int, heads: int) -> "BlockShape":
        """The block Korthikanti et al. count: MHA, plain 4h GeLU MLP, LayerNorm, dropout."""
        return cls(tokens, hidden, heads, heads, hidden // heads, 4 * hidden, dropout=True)


def block_activation_terms(
    block: BlockShape,
    b: float,
    t: int = 1,
    *,
    flash_attention: bool = False,
    sequence_parallel: bool = False,
    recompute: str = "none",
    fused_norm: bool = True,
) -> dict[str, float]:
    """Bytes each tensor a block keeps for backward, per microbatch of ``b`` samples on one of ``t`` GPUs.

    See the module docstring for the terms; zero terms are left out.
    """
    s, h, a, k, d, f = block.tokens, block.hidden, block.heads, block.kv_heads, block.head_dim, block.ffn
    sp = t if sequence_parallel else 1  # the divisor of the sequence-parallel region
    sbh = s * b * h
    kv = k / t if k >= t else 1.0  # key/value heads per GPU: fewer than tp are replicated (Megatron GQA)
    if recompute == "full":
        return {"block_input": BF16 * sbh / sp}
    norm_keep = BF16 if (fused_norm or block.norm == "layernorm") else FP32 + BF16  # fp32 upcast, bf16 output
    dv = block.mla.v_head_dim if block.mla is not None else d  # the value width (MLA: v_head_dim)
    terms: dict[str, float] = {
        "norm_inputs": 2 * norm_keep * sbh / sp,
        "qkv_input": BF16 * sbh / sp,
    }
    if block.mla is not None:
        terms.update(mla_activation_terms(block.mla, s, b, sp, norm_keep))
    terms.update({
        "q": BF16 * s * b * a * d / t,
        "k": BF16 * s * b * kv * d,
        "v": BF16 * s * b * kv * dv,
    })
    if block.fused_qkv and block.rotary:
        terms["qkv_retained"] = BF16 * s * b * (a / t + kv) * d
    if block.qk_norm:
        terms["qk_norm_inputs"] = norm_keep * s * b * (a / t + kv) * d
    entries = s * s if block.score_entries is None else block.score_entries
    if flash_attention:
        terms["softmax_stats"] = FP32 * a * s * b / t
    elif recompute != "selective":
        per_entry = BF16 + (MASK + BF16 if block.dropout else 0.0)
        terms["scores"] = per_entry * a * b * entries / t
    terms["attn_output"] = BF16 * s * b * a * dv / t
    if block.dropout:
        terms["attn_dropout_mask"] = MASK * sbh / sp
    if block.layerscale:
        terms["layerscale_inputs"] = 2 * BF16 * sbh / sp
    terms["mlp_input"] = BF16 * sbh / sp
    act_keeps = COMPOSITE_ACTIVATIONS.get(block.activation, 1)
    if block.gated:
        terms["mlp"] = (act_keeps + 3) * BF16 * s * b * f / t  # gate (act input), up, act(gate), product
    else:
        terms["mlp"] = (act_keeps + 1) * BF16 * s * b * f / t  # act input, fc2 input
    if block.dropout:
        terms["mlp_dropout_mask"] = MASK * sbh / sp
    return terms


def block_activation_bytes(block: BlockShape, b: float, t: int = 1, **options: object) -> float:
    """The sum of :func:`block_activation_terms` (same arguments)."""
    return sum(block_activation_terms(block, b, t, **options).values())  # type: ignore[arg-type]
