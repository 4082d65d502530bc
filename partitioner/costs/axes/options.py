"""The options of the context- and expert-parallel cost terms (format v3's cp, ep and etp axes).

Contract: :class:`AxisOptions` is a frozen dataclass; each field is one
constant (with its source) or one modelling choice of
:mod:`partitioner.costs.axes.context` and :mod:`partitioner.costs.axes.experts`.
:meth:`AxisOptions.from_mapping` validates a mapping and raises
:class:`~partitioner.problem.ProblemError` naming ``options.<key>`` for an
unknown key or a bad value; :meth:`AxisOptions.to_dict` is its inverse.
They are kept apart from :class:`~partitioner.costs.CostOptions` (the dense
model's constants) so that the two sets can be read and changed
independently; nothing here computes a cost.

More (the detail of this module): ``docs/internals/costs.md``, section ``partitioner.costs.axes.options``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from ...problem import ProblemError

__all__ = ["CP_ALGORITHMS", "EP_DISPATCHERS", "AxisOptions"]

CP_ALGORITHMS = ("p2p", "a2a", "all_gather")
EP_DISPATCHERS = ("alltoall", "allgather", "flex")
CHOICES: dict[str, tuple[str, ...]] = {"alltoall_links": ("max", "sum"), "grouped_gemm": ("multi_stream", "single_launch"),
                                      "ep_dispatcher": EP_DISPATCHERS, "moe_routing": ("random", "consecutive")}


@dataclass(frozen=True)
class AxisOptions:
    """Knobs and constants of the context- and expert-parallel terms.

    Parameters
    ----------
    cp_algorithm : {"p2p", "a2a", "all_gather", "fastest"}
        The attention algorithm of context parallelism [21]_: ``p2p`` (ring
        of KV chunks, Megatron's default [20]_), ``a2a`` (Ulysses all-to-all
        [22]_), ``all_gather`` (KV all-gathered), or ``fastest`` (per layer,
        the quickest the layer allows). A layer that cannot run the chosen
        algorithm (a sliding-window or chunked layer cannot run ``p2p`` [21]_;
        ``a2a`` needs the heads per tensor-parallel rank divisible by cp)
        gets the fastest it can run.
    cp_load_balance : bool
        Causal attention split into 2 x cp chunks, rank i holding chunks i
        and 2cp-1-i (Megatron's ``get_batch_on_this_cp_rank`` [20]_,
        torchtitan's ``headtail``): every rank computes the same number of
        query-key pairs. False: contiguous chunks, the last rank computes
        ``2 - 1/cp`` times the mean.
    cp_vision : bool
        Offer cp > 1 to vision-encoder layers and projectors. Megatron-LM
        shards only the language model's sequence (LLaVA applies CP to the
        language model; its MIMO path allows CP = 1 only), so the default
        is False: vision layers get cp = 1 entries only.
    cp_degrees : tuple of int
        The cp degrees offered (each must divide the sequence into 2 cp
        chunks when ``cp_load_balance``, else into cp).
    cp_min_tokens : int
        The problem builder offers cp > 1 only when the language model's
        sequence per sample has at least this many tokens. Megatron-Core and
        NeMo present context parallelism as the tool for long-context
        training, where one sequence's activations outgrow a GPU even with
        tensor parallelism ("critical for training long context models"
        [36]_ [20]_); at a few thousand tokens a Megatron user splits the
        batch instead. 8192 (8k, the shortest long-context setting) is a
        modelling choice; it keeps every short-sequence problem (and its
        answer) unchanged.
    moe_imbalance : float or None
        Load-imbalance factor of the routed experts, the busiest expert-
        parallel rank's routed copies over the mean (>= 1); it scales the
        busiest rank's expert work and the tokens it receives. 1 is what
        benchmarks with forced balance measure (Megatron's
        ``--moe-router-force-load-balancing``). None (the default): derived
        per (ep, local experts) from ``moe_load_cv``
        (:func:`~.moe_kernels.default_imbalance`).
    moe_load_cv : float
        Coefficient of variation of one expert's routed tokens in a
        microbatch under auxiliary-loss routing, the input of the derived
        imbalance (:func:`~.moe_kernels.default_imbalance`). 1.0, from the
        one published A/B of a trained router against forced balance [37]_:
        Qwen3-235B-A22B on 256 H100 (EP 8, 16 experts per rank, 4096 tokens
        per rank, the model's aux-loss router, dropless) ran 1.245, 1.21,
        1.15 and 1.09 times slower than with forced balance at 16k, 32k, 64k
        and 128k tokens. Under this cost model (the grouped GEMMs at the
        GPU's ops:byte ratio) the 16k and 32k pairs imply cv 1.01 and 0.99,
        a busiest rank at 1.51 times the mean (``1 + cv sqrt(2 ln 8 / 16)``);
        the 64k and 128k pairs, where attention and the CP ring are most of
        the step and dilute the same imbalance, 0.93 and 0.86. The value
        must be re-derived whenever the expert or dispatch costs change
        (``tests/test_calibration_routing.py`` checks the four pairs).
    moe_sync_us : float
        GPU idle time, microseconds, of the device-to-host synchronization
        every dropless MoE layer forward makes (Megatron's dispatchers copy
        the tokens per expert to the host before the all-to-all, or before
        the grouped GEMM at ep = 1 [20]_): a stream synchronization's round
        trip, about 6 us (9.6 us against 3.8 us per back-to-back kernel
        [38]_), plus the host's path to the next launch (the split sizes to
        lists, the all-to-all call, the chunk sort: about five PyTorch
        operators at a few microseconds each): 30.
    moe_host_ms : float
        Host time, ms, one MoE layer's forward and backward take to launch in
        eager execution (a third forward, two thirds backward): the layer
        runs no faster than its host launches it, so small per-GPU work
        (high tp, small microbatches) is host-bound, as Megatron's MoE guide
        says ("CPU Overhead Bottleneck ... Reduce kernel launches: Decrease
        TP size or increase micro-batch size" [20]_). 0 (the default): not
        charged, since no citable per-operator host cost was found; 8
        reproduces ModelZoo's Qwen3-235B TP4 row and orders its four
        layouts as measured, but overcharges runs that capture parts of the
        layer in CUDA graphs (DESIGN.md, "2026-12-03: MoE physics").
    kernel_launch_us : float
        Host time of one kernel launch, microseconds (about 4: a back-to-back
        launch takes 3.8 us per kernel [38]_); the floor of a
        ``multi_stream`` grouped GEMM is two launches per local expert.
    grouped_gemm : {"multi_stream", "single_launch"}
        How the grouped expert GEMMs run: ``multi_stream`` (Transformer
        Engine's default BF16 ``GroupedLinear``: one cuBLAS call per expert
        over several CUDA streams [39]_), ``single_launch`` (a CUTLASS or
        cuBLAS grouped kernel: no per-expert launches).
    ep_dispatcher : {"alltoall", "allgather", "flex"}
        Megatron's ``--moe-token-dispatcher-type`` [20]_: ``alltoall``
        (NCCL all-to-all over the ep group, then an all-gather over etp),
        ``allgather`` (every token all-gathered over the tp x ep group and
        the outputs reduce-scattered back), ``flex`` (DeepEP: a token bound
        for several experts on one node crosses the network once and is
        forwarded over NVLink [23]_; the dedup factor is derived from the
        routing, :func:`~.wiring.flex_dedup`).
    capacity_factor : float or None
        Expert capacity factor [24]_: each expert takes at most
        ``ceil(k T cf / E)`` of a rank's ``k T`` routed copies and every
        expert's buffer is padded to it. None: dropless (Megatron's default [20]_).
    ep_overlap : bool
        Megatron's ``--overlap-moe-expert-parallel-comm`` with
        ``--delay-wgrad-compute``: each layer's dispatch and combine of one
        microbatch run beside the other microbatch's compute in the merged
        forward-backward steady state. The hidden part is derived from the
        schedule (:func:`~.wiring.overlapped_ms`): each all-to-all hides
        behind its partner pass's compute, at most all of it, and the SMs the
        collective occupies slow that compute. Not with full recompute
        (Megatron refuses it), nor with the allgather dispatcher.
    moe_routing : {"random", "consecutive"}
        Where a token's ``k`` experts lie: ``random`` (a trained router, or
        Megatron's forced balance, which routes on random logits), or
        ``consecutive`` (``k`` experts in a row, token ``t`` to experts ``t k``
        ... ``t k + k - 1`` mod ``E``: NeMo AutoModel's ``FakeBalancedGate``
        [40]_), so with ``E / n >= k`` experts per node they sit on one node and
        the ``flex`` dispatcher sends the token over the network at most once
        (:func:`~.experts.flex_dedup`).
    ep_dedup : float
        Multiplier (<= 1) on the inter-node part of an all-to-all dispatch or
        combine (a token sent once per destination node [23]_); the
        ``flex`` dispatcher derives its own. 1: NCCL's all-to-all.
    alltoall_network_efficiency : float
        Fraction of ``inter_node_GBps`` the network part of an expert-
        parallel (or Ulysses) all-to-all achieves, in (0, 1]: 0.89, the
        median of DeepEP's six measured inter-node dispatch and combine
        bottleneck bandwidths on H800 with one ConnectX-7 400 Gb/s NIC per
        GPU (~50 GB/s): 43 / 43 GB/s at EP 16 (two nodes), 44 / 47 at EP 32,
        46 / 45 at EP 64 [41]_. Many-to-many RDMA traffic (incast at every
        receiver) does not reach the line rate a ring's point-to-point
        sends do.
    alltoall_links : {"max", "sum"}
        An all-to-all that spans nodes moves part of its bytes over NVLink
        and part over the NICs: ``max`` takes the slower of the two (they
        run concurrently), ``sum`` adds them (conservative).
    etp_degrees : tuple of int
        Expert tensor-parallel degrees offered on MoE layers with ep > 1;
        empty (the default): 1 and the config's tp (Megatron's default is
        etp = tp; its MoE guide and NVIDIA's recipes run etp = 1;
        torchtitan 0.3 has only 1). An ep = 1 key means etp = tp.
    ep_degrees : tuple of int
        Expert-parallel degrees offered on MoE layers besides 1; empty (the
        default): every power of two from 2 up to the routed experts, inside
        a node and across nodes, as published recipes run them (EP 8 to 32,
        across NVLink domains [20]_). Each offered E must divide the experts
        and E x etp the config's D T C.
    probs_bytes : float
        Bytes per routed copy of the router probabilities sent with the
        dispatch (fp32 in Megatron's all-to-all dispatcher).

    References
    ----------
    .. [21] NVIDIA Transformer Engine, ``pytorch/attention/dot_product_attention/
       context_parallel.py`` (``p2p``, ``all_gather``, ``a2a`` attention with
       context parallelism; sliding windows only with ``a2a`` or ``all_gather``).
    .. [20] NVIDIA Megatron-LM, ``docs/user-guide/features/context_parallel.md``
       ``megatron/core/transformer/moe/README.md`` (EP groups inside NVLink),
       ``megatron/training/arguments.py``
       (``--cp-comm-type`` default ``p2p``; ``--moe-expert-capacity-factor``
       default None, dropless) and ``megatron/core/utils.py``
       (``get_batch_on_this_cp_rank``: the sequence in 2 x cp chunks, rank i
       holding chunks i and 2cp-1-i).
    .. [22] S. A. Jacobs et al., "DeepSpeed Ulysses: System Optimizations for
       Enabling Training of Extreme Long Sequence Transformer Models",
       arXiv:2309.14509 (2023).
    .. [36] NVIDIA NeMo Framework User Guide, "Context Parallelism"
       (docs.nvidia.com/nemo-framework/user-guide/latest/longcontext/contextparallel.html).
    .. [37] Z. Yan et al. (NVIDIA), Megatron-MoE-ModelZoo,
       ``best_practice/qwen3/readme.md`` ("Long Context": 295 / 237, 335 / 277,
       368 / 320, 389 / 357 TFLOP/s forced balance / dropless), commit e865051
       (2026-05-16), as recorded in ``benchmarks/calibration/published.py``.
    .. [38] A. Gray, "Getting Started with CUDA Graphs", NVIDIA Technical Blog
       (2019): 9.6 us per short kernel with a stream synchronization after each,
       3.8 us launched back to back, 3.4 us in a graph.
    .. [39] NVIDIA Transformer Engine pull request 853, "Grouped GEMM via
       multi-stream cuBLAS" (``GroupedLinear``, the grouped GEMM of Megatron-
       Core's ``TEGroupedMLP``).
    .. [23] DeepSeek-AI, DeepEP (expert-parallel all-to-all kernels that send a
       token to each destination node once and forward it over NVLink).
    .. [24] D. Lepikhin et al., "GShard: Scaling Giant Models with Conditional
       Computation and Automatic Sharding", ICLR 2021 (expert capacity).
    .. [40] NVIDIA NeMo AutoModel, ``nemo_automodel/components/moe/layers.py``
       ``FakeBalancedGate.forward``: ``indices = arange(T k).view(-1, k) % E``
       (the ``fake_balanced_gate: true`` of its benchmark configurations).
    .. [41] DeepSeek-AI, DeepEP ``README.md`` (V1, commit of 2025-02-25; now
       ``docs/legacy.md``), "Normal kernels with NVLink and RDMA forwarding":
       H800 (~160 GB/s NVLink), CX7 InfiniBand 400 Gb/s (~50 GB/s), 4096
       tokens, hidden 7168, top-8; inter-node EP 16 / 32 / 64 dispatch 43 / 44
       / 46 GB/s and combine 43 / 47 / 45 GB/s (RDMA).
    """

    cp_algorithm: str = "p2p"
    cp_load_balance: bool = True
    cp_vision: bool = False
    cp_degrees: tuple[int, ...] = (1, 2, 4, 8)
    cp_min_tokens: int = 8192
    moe_imbalance: float | None = None
    moe_load_cv: float = 1.0
    moe_sync_us: float = 30.0
    moe_host_ms: float = 0.0
    kernel_launch_us: float = 4.0
    grouped_gemm: str = "multi_stream"
    ep_dispatcher: str = "alltoall"
    capacity_factor: float | None = None
    ep_overlap: bool = False
    ep_dedup: float = 1.0
    moe_routing: str = "random"
    alltoall_links: str = "max"
    alltoall_network_efficiency: float = 0.89
    etp_degrees: tuple[int, ...] = ()
    ep_degrees: tuple[int, ...] = ()
    probs_bytes: float = 4.0

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | "AxisOptions" | None) -> "AxisOptions":
        """Options from a mapping; an unknown key or a bad value is a :class:`ProblemError` naming it."""
        if options is None:
            return cls()
        if isinstance(options, AxisOptions):
            return options
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, value in options.items():
            where = f"options.{key}"
            if key not in known:
                raise ProblemError(f"unknown option {key!r} (options: {', '.join(sorted(known))})", path=where)
            if key == "cp_algorithm":
                if value not in (*CP_ALGORITHMS, "fastest"):
                    raise ProblemError(f"must be one of {', '.join(CP_ALGORITHMS)}, fastest; got {value!r}", path=where)
            elif key in CHOICES:
                if value not in CHOICES[key]:
                    raise ProblemError(f"must be one of {', '.join(CHOICES[key])}, got {value!r}", path=where)
            elif key in ("cp_load_balance", "cp_vision", "ep_overlap"):
                if not isinstance(value, bool):
                    raise ProblemError(f"must be true or false, got {value!r}", path=where)
            elif key in ("cp_degrees", "etp_degrees", "ep_degrees"):
                if isinstance(value, str):
                    value = [v for v in value.split(",") if v]
                elif isinstance(value, int) and not isinstance(value, bool):
                    value = [value]  # the CLI reads "-c cp_degrees=1" as the number 1
                try:
                    value = tuple(int(v) for v in value)
                except (TypeError, ValueError):
                    raise ProblemError(f"must be a list of positive integers, got {value!r}", path=where) from None
                if any(v < 1 for v in value):
                    raise ProblemError(f"must be positive integers, got {list(value)!r}", path=where)
                if key == "cp_degrees" and (not value or 1 not in value):
                    raise ProblemError(f"must be positive integers including 1, got {list(value)!r}", path=where)
            elif key == "cp_min_tokens":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ProblemError(f"must be a positive integer, got {value!r}", path=where)
            elif key == "moe_imbalance" and value is None:
                pass  # derived per (ep, local experts)
            elif key == "capacity_factor":
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                    raise ProblemError(f"must be a positive number or null (dropless), got {value!r}", path=where)
            else:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ProblemError(f"must be a non-negative number, got {value!r}", path=where)
                if key == "moe_imbalance" and value < 1:
                    raise ProblemError(f"must be >= 1 (the busiest rank over the mean), got {value!r}", path=where)
                if key == "alltoall_network_efficiency" and not 0 < value <= 1:
                    raise ProblemError(f"must be in (0, 1], got {value!r}", path=where)
                if key == "ep_dedup" and not 0 <= value <= 1:
                    raise ProblemError(f"must be in [0, 1], got {value!r}", path=where)
            values[key] = value
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
