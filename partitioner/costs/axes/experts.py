"""Mixture of experts and expert parallelism (format v3's ep and etp axes): FLOPs, traffic, memory.

Contract: pure functions of a MoE layer's shapes and a config's degrees
``(D, T, C, E, F)`` = (dp, tp, cp, ep, etp). The experts fold onto the
config's ``D T C`` ranks (Megatron's "MoE parallel folding", torchtitan's
"EP borrows ranks from FSDP and TP" [27]): the expert grid re-partitions
them into ``F x E x EDP`` with ``EDP = D T C / (E F)``
(:func:`expert_data_parallel`), which must be whole (:func:`ep_problem`).

* **FLOPs** -- :func:`moe_layer_flops` is Megatron-LM's ``moe_layer_flops``
(forward: ``4 T h f k g + 4 T h f_s g``, ``g = 3/2`` for a gated MLP) [27];
:func:`router_flops` the router (``2 T h E``, which Megatron leaves out).

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.axes.experts``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..comm import allgather_ms, allreduce_ms
from ..options import CostOptions
from .groups import GroupSpan, alltoall_ms

__all__ = [
    "moe_layer_flops",
    "router_flops",
    "expert_data_parallel",
    "ep_problem",
    "expert_configs",
    "tokens_per_rank",
    "routed_copies",
    "dispatch_buffer",
    "DispatchTimes",
    "dispatch_times",
    "allgather_dispatch_times",
    "flex_dedup",
    "rank_dedup",
    "moe_comm_ms",
    "expert_rank_flops",
    "expert_gemm_shape",
    "expert_weight_bytes",
    "expert_activation_bytes",
    "routed_mlp_tensors",
    "expert_grad_sync_ms",
]


def moe_layer_flops(tokens: float, hidden: int, moe_ffn: int, top_k: int, shared_ffn: int = 0, gated: bool = True) -> float:
    """Forward FLOPs of a MoE layer's experts over ``tokens`` tokens, as Megatron-LM counts them [27]_.

    ``4 T h f k g`` for the ``k`` routed experts a token visits and ``4 T h
    f_s g`` for the shared experts, ``g = 3/2`` for a gated (SwiGLU) MLP:
    two matrices (three gated) of ``h x f``, 2 FLOPs per multiply-add.

    References
    ----------
    .. [27] NVIDIA Megatron-LM: ``megatron/training/training.py``
       (``num_floating_point_operations``: ``moe_layer_flops``),
       ``megatron/core/transformer/moe/`` (``token_dispatcher.py``:
       ``MoEAlltoAllTokenDispatcher``, A2A(EP) -> AG(ETP) -> experts ->
       RS(ETP) -> A2A(EP), probabilities sent along; ``moe_utils.py``:
       ``get_capacity``; ``README.md``: MoE parallel folding),
       ``megatron/core/parallel_state.py`` (``expert_tensor_model_pipeline``
       size must divide the world), ``megatron/training/
       theoretical_memory_usage.py`` (bytes per parameter 18, or 6 + 12/dp
       with the distributed optimizer); torchtitan ``ParallelDims``
       ("expert_parallel_degree (ep) must divide dp_shard * cp * tp").
    """
    g = 1.5 if gated else 1.0
    return 4.0 * tokens * hidden * moe_ffn * top_k * g + 4.0 * tokens * hidden * shared_ffn * g


def router_flops(tokens: float, hidden: int, experts: int) -> float:
    """Forward FLOPs of the router's ``hidden x experts`` projection (not in Megatron's count)."""
    return 2.0 * tokens * hidden * experts


def expert_data_parallel(dp: int, tp: int, cp: int, ep: int, etp: int = 1) -> int:
    """``EDP = D T C / (E F)``: the replicas of each expert shard, over which its gradients are reduced."""
    devices = dp * tp * cp
    if devices % (ep * etp):
        raise ValueError(f"ep*etp = {ep * etp} does not divide dp*tp*cp = {devices}")
    return devices // (ep * etp)


def ep_problem(experts: int, dp: int, tp: int, cp: int, ep: int, etp: int = 1) -> str | None:
    """Why ``(ep, etp)`` cannot split ``experts`` on a ``(dp, tp, cp)`` config; None when it can.

    ``E % ep == 0`` (each rank holds ``E / ep`` whole experts) and ``ep x
    etp`` divides ``dp x tp x cp`` (Megatron: "world_size ... is not
    divisible by expert_tensor_model_pipeline_parallel size"; torchtitan:
    "ep must divide dp_shard * cp * tp") [27]_.

    References
    ----------
    .. [27] NVIDIA Megatron-LM: ``megatron/training/training.py``
       (``num_floating_point_operations``: ``moe_layer_flops``),
       ``megatron/core/transformer/moe/`` (``token_dispatcher.py``:
       ``MoEAlltoAllTokenDispatcher``, A2A(EP) -> AG(ETP) -> experts ->
       RS(ETP) -> A2A(EP), probabilities sent along; ``moe_utils.py``:
       ``get_capacity``; ``README.md``: MoE parallel folding),
       ``megatron/core/parallel_state.py`` (``expert_tensor_model_pipeline``
       size must divide the world), ``megatron/training/
       theoretical_memory_usage.py`` (bytes per parameter 18, or 6 + 12/dp
       with the distributed optimizer); torchtitan ``ParallelDims``
       ("expert_parallel_degree (ep) must divide dp_shard * cp * tp").
    """
    if ep < 1 or etp < 1:
        return f"ep and etp must be >= 1, got ep={ep}, etp={etp}"
    if experts % ep:
        return f"ep={ep} does not divide the {experts} routed experts"
    devices = dp * tp * cp
    if devices % (ep * etp):
        return f"ep*etp = {ep * etp} does not divide dp*tp*cp = {devices}"
    return None


def expert_configs(experts: int, dp: int, tp: int, cp: int, etp_degrees: tuple[int, ...] = (1,)) -> list[tuple[int, int]]:
    """Every ``(ep, etp)`` a MoE layer offers on a ``(dp, tp, cp)`` config: ep a divisor of ``experts``."""
    out = []
    for ep in range(1, experts + 1):
        for etp in etp_degrees:
            if ep_problem(experts, dp, tp, cp, ep, etp) is None and (ep, etp) not in out:
                out.append((ep, etp))
    return out


def tokens_per_rank(samples: float, tokens: float, tp: int, cp: int) -> float:
    """Tokens of a MoE layer's input on one rank: ``b s / (t c)`` (sequence- and context-parallel shards)."""
    return samples * tokens / (tp * cp)


def routed_copies(tokens: float, top_k: int, experts: int, capacity_factor: float | None = None) -> float:
    """Token copies a rank dispatches: ``k T`` dropless; ``E ceil(k T cf / E)`` padded to capacity [24]_ [27]_.

    References
    ----------
    .. [24] D. Lepikhin et al., "GShard", ICLR 2021 (expert capacity).
    .. [27] NVIDIA Megatron-LM: ``megatron/training/training.py``
       (``num_floating_point_operations``: ``moe_layer_flops``),
       ``megatron/core/transformer/moe/`` (``token_dispatcher.py``:
       ``MoEAlltoAllTokenDispatcher``, A2A(EP) -> AG(ETP) -> experts ->
       RS(ETP) -> A2A(EP), probabilities sent along; ``moe_utils.py``:
       ``get_capacity``; ``README.md``: MoE parallel folding),
       ``megatron/core/parallel_state.py`` (``expert_tensor_model_pipeline``
       size must divide the world), ``megatron/training/
       theoretical_memory_usage.py`` (bytes per parameter 18, or 6 + 12/dp
       with the distributed optimizer); torchtitan ``ParallelDims``
       ("expert_parallel_degree (ep) must divide dp_shard * cp * tp").
    """
    if capacity_factor is None:
        return top_k * tokens
    return experts * math.ceil(top_k * tokens * capacity_factor / experts)


def dispatch_buffer(copies: float, hidden: int, elem_bytes: float = 2.0, probs_bytes: float = 0.0) -> float:
    """A rank's all-to-all buffer for ``copies`` routed token copies: ``R (h beta + probs)`` bytes."""
    return copies * (hidden * elem_bytes + probs_bytes)


@dataclass(frozen=True)
class DispatchTimes:
    """The four expert-parallel transfers of one MoE layer and microbatch on one rank, in ms.

    Forward: ``dispatch`` (tokens and probabilities to the experts, then the
    expert-tensor all-gather) and ``combine`` (the reduce-scatter, then the
    outputs back); backward in reverse order: ``combine_grad`` and
    ``dispatch_grad`` (an all-to-all's gradient is an all-to-all, an
    all-gather's a reduce-scatter).
    """

    dispatch: float = 0.0
    combine: float = 0.0
    combine_grad: float = 0.0
    dispatch_grad: float = 0.0

    @property
    def fwd(self) -> float:
        return self.dispatch + self.combine

    @property
    def bwd(self) -> float:
        return self.combine_grad + self.dispatch_grad


def dispatch_times(copies: float, hidden: int, ep: int, etp: int, ep_span: GroupSpan, etp_span: GroupSpan, *,
                   intra_GBps: float, inter_GBps: float, opts: CostOptions, links: str = "max", dedup: float = 1.0,
                   probs_bytes: float = 4.0, elem_bytes: float = 2.0, intra_dedup: float = 1.0) -> DispatchTimes:
    """The all-to-all dispatcher's four transfers on one rank that sends ``copies`` routed token copies.

    Each all-to-all moves the rank's ``copies x h x beta`` buffer over the
    ``ep`` group (the dispatch also the fp32 probabilities) on the links
    the group spans (:func:`~.groups.alltoall_ms`, ``dedup`` on its network
    part, ``intra_dedup`` on its NVLink part); with ``etp > 1`` an all-gather (or reduce-scatter) of ``etp x
    copies x h x beta`` over the expert-tensor group follows the dispatch
    (precedes the combine) [27]_. Latency and NVLink efficiency are the
    dense model's (``opts``); the network part runs at
    ``opts.axes.alltoall_network_efficiency`` of the NIC's rate.

    References
    ----------
    .. [27] NVIDIA Megatron-LM: ``megatron/training/training.py``
       (``num_floating_point_operations``: ``moe_layer_flops``),
       ``megatron/core/transformer/moe/`` (``token_dispatcher.py``:
       ``MoEAlltoAllTokenDispatcher``, A2A(EP) -> AG(ETP) -> experts ->
       RS(ETP) -> A2A(EP), probabilities sent along; ``moe_utils.py``:
       ``get_capacity``; ``README.md``: MoE parallel folding),
       ``megatron/core/parallel_state.py`` (``expert_tensor_model_pipeline``
       size must divide the world), ``megatron/training/
       theoretical_memory_usage.py`` (bytes per parameter 18, or 6 + 12/dp
       with the distributed optimizer); torchtitan ``ParallelDims``
       ("expert_parallel_degree (ep) must divide dp_shard * cp * tp").
    """
    common: dict[str, Any] = dict(latency_us=opts.collective_latency_us, nvlink_efficiency=opts.nvlink_efficiency,
                                  links=links, dedup=dedup, intra_dedup=intra_dedup,
                                  network_efficiency=opts.axes.alltoall_network_efficiency)
    tokens_a2a = with_probs = etp_ms = 0.0
    if ep > 1:
        tokens_a2a = alltoall_ms(dispatch_buffer(copies, hidden, elem_bytes), ep_span, intra_GBps, inter_GBps, **common)
        with_probs = alltoall_ms(dispatch_buffer(copies, hidden, elem_bytes, probs_bytes), ep_span, intra_GBps,
                                 inter_GBps, **common)
    if etp > 1:
        GBps, eff = (intra_GBps, opts.nvlink_efficiency) if etp_span.inside_node else (inter_GBps, 1.0)
        etp_ms = allgather_ms(etp * copies * hidden * elem_bytes, etp, GBps, opts, link_efficiency=eff)
    return DispatchTimes(with_probs + etp_ms, tokens_a2a + etp_ms, tokens_a2a + etp_ms, tokens_a2a + etp_ms)


def allgather_dispatch_times(tokens: float, hidden: int, experts: int, group: GroupSpan, *, intra_GBps: float,
                             inter_GBps: float, opts: CostOptions, elem_bytes: float = 2.0) -> DispatchTimes:
    """The allgather dispatcher's transfers: every rank all-gathers the ``tokens`` of its ``tp x ep`` group.

    Megatron's ``MoEAllGatherTokenDispatcher`` gathers the hidden states
    ("[S/TP*B, H] -> [S*B*EP, H]") with the routing map and probabilities
    (1 + 4 B per token and expert) over the group, each rank keeps its
    experts' tokens, and the combine reduce-scatters the outputs back;
    backward runs the reverse collectives on the same volumes [27]_.

    References
    ----------
    .. [27] NVIDIA Megatron-LM: ``megatron/training/training.py``
       (``num_floating_point_operations``: ``moe_layer_flops``),
       ``megatron/core/transformer/moe/`` (``token_dispatcher.py``:
       ``MoEAlltoAllTokenDispatcher``, A2A(EP) -> AG(ETP) -> experts ->
       RS(ETP) -> A2A(EP), probabilities sent along; ``moe_utils.py``:
       ``get_capacity``; ``README.md``: MoE parallel folding),
       ``megatron/core/parallel_state.py`` (``expert_tensor_model_pipeline``
       size must divide the world), ``megatron/training/
       theoretical_memory_usage.py`` (bytes per parameter 18, or 6 + 12/dp
       with the distributed optimizer); torchtitan ``ParallelDims``
       ("expert_parallel_degree (ep) must divide dp_shard * cp * tp").
    """
    if group.ranks <= 1:
        return DispatchTimes()
    GBps, eff = (intra_GBps, opts.nvlink_efficiency) if group.inside_node else (inter_GBps, 1.0)
    gathered = group.ranks * tokens * hidden * elem_bytes
    routing = group.ranks * tokens * experts * 5.0
    tokens_ms = allgather_ms(gathered, group.ranks, GBps, opts, link_efficiency=eff)
    with_routing = allgather_ms(gathered + routing, group.ranks, GBps, opts, link_efficiency=eff)
    return DispatchTimes(with_routing, tokens_ms, tokens_ms, tokens_ms)


def flex_dedup(experts: int, top_k: int, span: GroupSpan, routing: str = "random") -> float:
    """The network bytes of a DeepEP dispatch over NCCL's, for a group spanning ``span.nodes`` nodes.

    NCCL's all-to-all sends each of a token's ``k`` routed copies to its
    expert's rank: ``k (n-1)/n`` copies leave the node on average. DeepEP
    sends a token once to each other node holding one of its experts and
    forwards it inside that node over NVLink [23]_: with the ``E / n``
    experts of each node and ``k`` distinct experts drawn uniformly, ``(n-1)
    (1 - C(E - E/n, k) / C(E, k))`` copies leave; with ``routing``
    ``consecutive`` (``k`` experts in a row from a multiple of ``k``), the
    ``ceil(k n / E)`` nodes they span, each remote with odds ``(n-1)/n``.
    1 inside one node.

    References
    ----------
    .. [23] DeepSeek-AI, DeepEP README (normal kernels: NVLink and RDMA
       forwarding, a token sent once per destination node).
    """
    n = span.nodes
    if n <= 1 or top_k <= 0 or experts % n:
        return 1.0
    if routing == "consecutive":
        return min(top_k, math.ceil(top_k * n / experts)) / top_k
    miss = math.comb(experts - experts // n, top_k) / math.comb(experts, top_k)
    return (n - 1) * (1.0 - miss) / (top_k * (n - 1) / n)


def rank_dedup(experts: int, top_k: int, ranks: int, routing: str = "random") -> float:
    """The NVLink bytes of a DeepEP dispatch over NCCL's, for ``ranks`` ranks of ``E / ranks`` experts each.

    DeepEP sends a token once to each rank holding one of its experts
    (``is_token_in_rank``) and the rank permutes it to its local experts
    [23]_; NCCL's all-to-all sends every routed copy. Per token: the
    expected distinct ranks over ``k`` copies, ``r (1 - C(E - E/r, k) /
    C(E, k))`` with ``k`` distinct experts drawn uniformly, ``ceil(k r / E)``
    with ``routing`` ``consecutive``. 1 for one rank or one local expert.

    References
    ----------
    .. [23] DeepSeek-AI, DeepEP README (normal kernels: NVLink and RDMA
       forwarding, a token sent once per destination node).
    """
    if ranks <= 1 or top_k <= 0 or experts % ranks or experts // ranks <= 1:
        return 1.0
    if routing == "consecutive":
        return min(top_k, math.ceil(top_k * ranks / experts)) / top_k
    miss = math.comb(experts - experts // ranks, top_k) / math.comb(experts, top_k)
    return ranks * (1.0 - miss) / top_k


def moe_comm_ms(copies: float, hidden: int, ep: int, etp: int, ep_span: GroupSpan, etp_span: GroupSpan, *,
                intra_GBps: float, inter_GBps: float, opts: CostOptions, links: str = "max", dedup: float = 1.0,
                probs_bytes: float = 4.0, elem_bytes: float = 2.0) -> tuple[float, float]:
    """``(forward, backward)`` ms of one MoE layer's all-to-all dispatcher traffic on one rank, none hidden.

    Forward: the dispatch (tokens and router probabilities) and the combine
    all-to-all over the ``ep`` group; backward: the combine's and the
    dispatch's gradients, two more all-to-alls of the tokens' size. With
    ``etp > 1`` each rank all-gathers the dispatched copies over the expert-
    tensor group (``etp R h beta`` gathered) and reduce-scatters the
    experts' output, forward and backward (:func:`dispatch_times`).
    """
    times = dispatch_times(copies, hidden, ep, etp, ep_span, etp_span, intra_GBps=intra_GBps, inter_GBps=inter_GBps,
                           opts=opts, links=links, dedup=dedup, probs_bytes=probs_bytes, elem_bytes=elem_bytes)
    return times.fwd, times.bwd


def expert_rank_flops(tokens: float, hidden: int, moe_ffn: int, top_k: int, gated: bool = True,
                      imbalance: float = 1.0) -> float:
    """Forward FLOPs of the routed experts on the busiest rank holding ``tokens`` of the layer's input.

    Every rank's share of the experts' work is ``moe_layer_flops`` of its
    own tokens whatever ``E`` and ``F`` (the experts fold onto the same
    ranks); the busiest does ``imbalance`` x that.
    """
    return imbalance * moe_layer_flops(tokens, hidden, moe_ffn, top_k, 0, gated)


def expert_gemm_shape(tokens: float, top_k: int, experts: int, ep: int, etp: int, moe_ffn: int) -> tuple[float, float]:
    """``(rows, width)`` of one local expert's GEMM: ``k T ep F / E`` token copies, ``f / F`` wide.

    After the dispatch a rank holds its ``E / ep`` experts' share of the
    ``ep`` ranks' ``k T`` copies each (``F`` times more after the expert-
    tensor all-gather), each expert a ``1 / F`` slice of the ``f`` columns.
    """
    rows = top_k * tokens * ep * etp / experts
    return rows, moe_ffn / etp


def expert_weight_bytes(routed_params: float, ep: int, etp: int, edp: int, *, bytes_per_param: float,
                        optimizer_bytes_per_param: float, distributed_optimizer: bool, frozen_bytes_per_param: float = 2.0,
                        frozen: bool = False) -> float:
    """Bytes of a layer's routed experts on one rank: ``routed / (E F)`` parameters [27]_.

    Each parameter costs ``bytes_per_param`` (18 in Megatron's estimator),
    its optimizer part sharded over EDP with the distributed optimizer
    (``6 + 12 / edp``); a frozen expert its bf16 weight.

    References
    ----------
    .. [27] NVIDIA Megatron-LM: ``megatron/training/training.py``
       (``num_floating_point_operations``: ``moe_layer_flops``),
       ``megatron/core/transformer/moe/`` (``token_dispatcher.py``:
       ``MoEAlltoAllTokenDispatcher``, A2A(EP) -> AG(ETP) -> experts ->
       RS(ETP) -> A2A(EP), probabilities sent along; ``moe_utils.py``:
       ``get_capacity``; ``README.md``: MoE parallel folding),
       ``megatron/core/parallel_state.py`` (``expert_tensor_model_pipeline``
       size must divide the world), ``megatron/training/
       theoretical_memory_usage.py`` (bytes per parameter 18, or 6 + 12/dp
       with the distributed optimizer); torchtitan ``ParallelDims``
       ("expert_parallel_degree (ep) must divide dp_shard * cp * tp").
    """
    params = routed_params / (ep * etp)
    if frozen:
        return params * frozen_bytes_per_param
    per = bytes_per_param
    if distributed_optimizer:
        per -= optimizer_bytes_per_param * (1.0 - 1.0 / edp)
    return params * per


def routed_mlp_tensors(gated: bool, fused_glu: bool = True) -> int:
    """Tensors ``f`` wide (per ``etp`` shard) a routed copy keeps in the expert MLP for backward.

    Gated, fused (Megatron-Core's ``TEGroupedMLP`` with
    ``bias_activation_fusion``: ``WeightedSwiGLUFunction`` saves only its
    input) [36]_: the fc1 output (gate and up, 2) and the fc2 input (1), 3.
    Gated, unfused (``act(gate) * up`` as autograd ops, torchtitan's
    ``GroupedExperts``): gate, up, ``act(gate)`` and the product, 4. Plain:
    the activation's input and the fc2 input, 2.

    References
    ----------
    .. [36] NVIDIA Megatron-Core 0.16.1, ``transformer/moe/experts.py``
       (``TEGroupedMLP.forward``: fc1, ``bias_act_func`` with
       ``weighted_bias_swiglu_impl`` when ``bias_activation_fusion``, else
       ``glu`` and a multiply by the probabilities; fc2) and
       ``fusions/fused_bias_swiglu.py`` (``WeightedSwiGLUFunction.forward``:
       ``ctx.save_for_backward(input, weights)``).
    """
    if not gated:
        return 2
    return 3 if fused_glu else 4


def expert_activation_bytes(copies: float, hidden: int, moe_ffn: int, etp: int, gated: bool = True,
                            imbalance: float = 1.0, padded: bool = False, router_tokens: float = 0.0, experts: int = 0,
                            elem_bytes: float = 2.0, fused_glu: bool = True) -> float:
    """Bytes the routed experts of one MoE layer keep for backward on one rank.

    The experts' input (``etp R h``, gathered: the grouped fc1's saved
    input) and, per copy, the MLP's :func:`routed_mlp_tensors` over its
    ``f / F`` columns; ``R`` x the imbalance factor when dropless (the
    padded buffer is fixed), plus the router's fp32 logits and
    probabilities (``2 x 4 T E`` bytes).
    """
    r = copies if padded else imbalance * copies
    width = routed_mlp_tensors(gated, fused_glu)
    stored = etp * r * (hidden + width * moe_ffn / etp) * elem_bytes
    return stored + 8.0 * router_tokens * experts


def expert_grad_sync_ms(routed_params: float, ep: int, etp: int, edp_span: GroupSpan, *, intra_GBps: float,
                        inter_GBps: float, opts: CostOptions) -> float:
    """One all-reduce of a layer's expert gradients (``routed / (E F)`` per rank) over the EDP group [7]_ [27]_.

    References
    ----------
    .. [7] R. Thakur, R. Rabenseifner, W. Gropp, "Optimization of Collective
       Communication Operations in MPICH", IJHPCA 19(1), 2005.
    .. [27] NVIDIA Megatron-LM: ``megatron/training/training.py``
       (``num_floating_point_operations``: ``moe_layer_flops``),
       ``megatron/core/transformer/moe/`` (``token_dispatcher.py``:
       ``MoEAlltoAllTokenDispatcher``, A2A(EP) -> AG(ETP) -> experts ->
       RS(ETP) -> A2A(EP), probabilities sent along; ``moe_utils.py``:
       ``get_capacity``; ``README.md``: MoE parallel folding),
       ``megatron/core/parallel_state.py`` (``expert_tensor_model_pipeline``
       size must divide the world), ``megatron/training/
       theoretical_memory_usage.py`` (bytes per parameter 18, or 6 + 12/dp
       with the distributed optimizer); torchtitan ``ParallelDims``
       ("expert_parallel_degree (ep) must divide dp_shard * cp * tp").
    """
    if edp_span.ranks <= 1 or routed_params <= 0:
        return 0.0
    GBps, eff = (intra_GBps, opts.nvlink_efficiency) if edp_span.inside_node else (inter_GBps, 1.0)
    nbytes = routed_params / (ep * etp) * opts.grad_bytes_per_param
    return allreduce_ms(nbytes, edp_span.ranks, GBps, opts, link_efficiency=eff)
