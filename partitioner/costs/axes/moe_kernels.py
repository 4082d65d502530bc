"""The routed experts of a MoE layer as GPUs run them: grouped GEMMs, token permutation, router, host sync.

Contract: pure functions of the work one rank's routed experts do in one
microbatch (:class:`ExpertWork`) and of the cluster; times in ms. The same
physics prices every expert-parallel degree, ep = 1 included (one rank then
holds all ``E`` experts): :mod:`.wiring` adds the dispatch traffic.

* **grouped GEMMs** (:func:`expert_gemm_ms`) -- Megatron-Core runs a rank's
  ``E / ep`` local experts as grouped GEMMs (``--moe-grouped-gemm``,
  Transformer Engine's ``GroupedLinear`` [43]): fc1 (gate and up fused,
  ``h x 2f`` for a gated MLP) and fc2 (``f x h``) per expert, forward,
  input gradient (dgrad) and weight gradient (wgrad). Each pass is a
  roofline, the slower of

The detail, and the references cited above: ``docs/internals/costs.md``, section ``partitioner.costs.axes.moe_kernels``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...presets import ClusterSpec
from ..compute.flops import efficiency
from ..compute.hardware import generation
from ..compute.precision import fp8_rate
from ..memory.traffic import Traffic, traffic_ms
from ..options import BF16_BYTES, CostOptions

__all__ = [
    "ROUTER_FWD_BYTES",
    "ROUTER_BWD_BYTES",
    "MAIN_GRAD_BYTES",
    "ExpertWork",
    "tile_fill",
    "expert_gemm_ms",
    "permutation_traffic",
    "router_traffic",
    "host_sync_ms",
    "default_imbalance",
]

ROUTER_FWD_BYTES = 30.0  # per token x expert: logits 4, score function 8, top-k 4, map + probs 5, aux/z losses 9
ROUTER_BWD_BYTES = 20.0  # per token x expert: score-function and loss gradients, read and write
MAIN_GRAD_BYTES = 8.0  # per parameter and wgrad pass: the fp32 main_grad read and written (accumulation fusion)


@dataclass(frozen=True)
class ExpertWork:
    """The routed experts' work on one rank in one microbatch.

    ``rows`` are the token copies the rank's experts process (after the
    expert-tensor all-gather; the busiest rank's, imbalance included),
    ``local_experts`` the experts it holds (``E / ep``), ``width`` each
    expert's columns on the rank (``f / etp``).
    """

    rows: float
    local_experts: int
    hidden: int
    width: float
    gated: bool = True

    @property
    def matrices(self) -> int:
        return 3 if self.gated else 2

    @property
    def params(self) -> float:
        """The rank's routed parameters (``n h f / etp`` per local expert)."""
        return self.matrices * self.hidden * self.width * self.local_experts

    @property
    def rows_per_expert(self) -> float:
        return self.rows / max(1, self.local_experts)


def tile_fill(rows: float, tile: int) -> float:
    """The useful fraction of an expert's row tiles: ``m / max(T, m + T/2)`` for ``m`` rows, tiles of ``T``.

    Routing makes each expert's ``m`` vary, so its last tile is on average
    half full; an expert with fewer rows than half a tile still runs a
    whole one [6]_.

    References
    ----------
    .. [6] NVIDIA, "Matrix Multiplication Background User's Guide", Deep
       Learning Performance documentation (tile and wave quantization).
    """
    if rows <= 0:
        return 1.0
    return rows / max(float(tile), rows + tile / 2.0)


def expert_gemm_ms(work: ExpertWork, cluster: ClusterSpec, opts: CostOptions) -> tuple[float, float, float]:
    """``(forward, dgrad, wgrad)`` ms of a rank's grouped expert GEMMs in one microbatch (see the module doc).

    Each pass is the slower of its FLOPs at the grouped GEMM's rate and its
    HBM bytes (the local experts' weights: 2 B per parameter forward and
    dgrad, 8 B for wgrad's fp32 accumulation; the activations in and out);
    with ``grouped_gemm="multi_stream"`` no faster than its host launches.
    Under FP8 (``opts.fp8``) the FLOPs run at the FP8 rate; the weight bytes
    stay the BF16 count (an upper bound: the fp8 copies are cached per
    iteration).
    """
    if work.rows <= 0 or work.local_experts <= 0:
        return 0.0, 0.0, 0.0
    gen = generation(cluster)
    flops = 2.0 * work.rows * work.hidden * work.width * work.matrices
    rate = cluster.peak_tflops * 1e9 * efficiency(work.width, work.rows, opts, cluster, grouped=True)
    if opts.fp8:  # the experts' grouped GEMMs in FP8 (:mod:`partitioner.costs.compute.precision`)
        rate = fp8_rate(rate, cluster, opts)
    m = work.rows_per_expert
    compute_rows = flops / (rate * tile_fill(m, gen.gemm_tile_rows))  # fwd and dgrad: M = the expert's rows
    compute_k = flops / (rate * tile_fill(m, gen.gemm_tile_rows // 2))  # wgrad: the rows are its K (finer steps)
    acts = BF16_BYTES * work.rows * (2 * work.hidden + work.matrices * work.width)
    weights = BF16_BYTES * work.params
    hbm = cluster.hbm_GBps
    fwd, dgrad, wgrad = compute_rows, compute_rows, compute_k
    if opts.memory_bound_ops and hbm is not None:
        fwd = max(fwd, traffic_ms(weights + acts, hbm, opts.hbm_efficiency))
        dgrad = max(dgrad, traffic_ms(weights + acts, hbm, opts.hbm_efficiency))
        wgrad = max(wgrad, traffic_ms(MAIN_GRAD_BYTES * work.params + acts, hbm, opts.hbm_efficiency))
    ax = opts.axes
    if ax.grouped_gemm == "multi_stream":
        floor = 2 * work.local_experts * ax.kernel_launch_us * 1e-3  # fc1 and fc2: one cuBLAS call per expert
        fwd, dgrad, wgrad = max(fwd, floor), max(dgrad, floor), max(wgrad, floor)
    return fwd, dgrad, wgrad


def permutation_traffic(tokens: float, copies: float, received: float, hidden: int, width: float, *,
                        local_experts: int, exchanged: bool, gated: bool = True) -> Traffic:
    """HBM bytes of a MoE layer's token permutation and routed activation function on one rank.

    ``tokens`` enter the layer on the rank, ``copies`` (``k T``) leave its
    permutation, ``received`` rows reach its experts (after the dispatch and
    the expert-tensor all-gather, busiest rank); ``exchanged``: tokens came
    from other ranks (ep or etp > 1), so with several ``local_experts`` they
    are sorted by expert and back. The activation function runs over
    ``received x width`` elements. Forward and backward move the same
    permutation bytes.
    """
    e = BF16_BYTES
    moved = 2 * e * hidden * (tokens + copies)  # permute: read T, write R; unpermute: read R, write T
    if exchanged and local_experts > 1:
        moved += 2 * 2 * e * hidden * received  # sort by local expert and back: read and write R each
    act = received * width
    fwd_act, bwd_act = (6.0 * act, 10.0 * act) if gated else (4.0 * act, 6.0 * act)
    return Traffic(moved + fwd_act, moved + bwd_act)


def router_traffic(tokens: float, experts: int) -> Traffic:
    """HBM bytes of the router's memory-bound kernels over ``tokens x experts`` fp32 scores (module doc)."""
    n = tokens * experts
    return Traffic(ROUTER_FWD_BYTES * n, ROUTER_BWD_BYTES * n)


def host_sync_ms(opts: CostOptions) -> float:
    """The GPU's idle time around one MoE layer's device-to-host synchronization (forward), in ms.

    ``moe_sync_us`` for a dropless dispatcher; none with a capacity factor
    (Megatron pads every expert to its capacity and needs no host copy of
    the counts).
    """
    ax = opts.axes
    if ax.capacity_factor is not None:
        return 0.0
    return ax.moe_sync_us * 1e-3


def default_imbalance(ep: int, local_experts: int, cv: float) -> float:
    """The busiest of ``ep`` ranks' routed copies over the mean, each rank holding ``local_experts``.

    ``1 + cv sqrt(2 ln(ep) / local_experts)``: a rank's load sums its
    experts', whose relative spread ``cv`` falls by the square root of how
    many it holds, and the largest of ``ep`` near-normal loads lies about
    ``sqrt(2 ln ep)`` spreads above the mean. 1 at ep = 1.
    """
    if ep <= 1 or cv <= 0:
        return 1.0
    return 1.0 + cv * math.sqrt(2.0 * math.log(ep) / max(1, local_experts))
