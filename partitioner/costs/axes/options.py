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

References
----------
.. [20] NVIDIA Megatron-LM, ``docs/user-guide/features/context_parallel.md``
   ``megatron/core/transformer/moe/README.md`` (EP groups inside NVLink),
   ``megatron/training/arguments.py``
   (``--cp-comm-type`` default ``p2p``; ``--moe-expert-capacity-factor``
   default None, dropless) and ``megatron/core/utils.py``
   (``get_batch_on_this_cp_rank``: the sequence in 2 x cp chunks, rank i
   holding chunks i and 2cp-1-i).
.. [36] NVIDIA NeMo Framework User Guide, "Context Parallelism"
   (docs.nvidia.com/nemo-framework/user-guide/latest/longcontext/contextparallel.html).
.. [21] NVIDIA Transformer Engine, ``pytorch/attention/dot_product_attention/
   context_parallel.py`` (``p2p``, ``all_gather``, ``a2a`` attention with
   context parallelism; sliding windows only with ``a2a`` or ``all_gather``).
.. [22] S. A. Jacobs et al., "DeepSpeed Ulysses: System Optimizations for
   Enabling Training of Extreme Long Sequence Transformer Models",
   arXiv:2309.14509 (2023).
.. [23] DeepSeek-AI, DeepEP (expert-parallel all-to-all kernels that send a
   token to each destination node once and forward it over NVLink).
.. [24] D. Lepikhin et al., "GShard: Scaling Giant Models with Conditional
   Computation and Automatic Sharding", ICLR 2021 (expert capacity).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from ...problem import ProblemError

__all__ = ["CP_ALGORITHMS", "AxisOptions"]

CP_ALGORITHMS = ("p2p", "a2a", "all_gather")


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
    moe_imbalance : float
        Load-imbalance factor of the routed experts, the busiest expert-
        parallel rank's tokens over the mean (>= 1). No published default;
        1 is what benchmarks with forced balance measure.
    capacity_factor : float or None
        Expert capacity factor [24]_: each expert takes at most
        ``ceil(k T cf / E)`` of a rank's ``k T`` routed copies and every
        expert's buffer is padded to it. None: dropless (Megatron's default [20]_).
    ep_overlap : float
        Fraction of the expert-parallel all-to-alls hidden behind compute
        (Megatron's ``--overlap-moe-expert-parallel-comm``); 0 exposes them.
    ep_dedup : float
        Multiplier (<= 1) on the inter-node part of a dispatch or combine:
        DeepEP-style kernels send a token once per destination node [23]_.
        1: NCCL's all-to-all, one copy per destination rank.
    alltoall_links : {"max", "sum"}
        An all-to-all that spans nodes moves part of its bytes over NVLink
        and part over the NICs: ``max`` takes the slower of the two (they
        run concurrently), ``sum`` adds them (conservative).
    etp_degrees : tuple of int
        Expert tensor-parallel degrees offered on MoE layers (torchtitan 0.3
        has only 1; Megatron defaults to etp = tp).
    ep_degrees : tuple of int
        Expert-parallel degrees offered on MoE layers besides 1; empty (the
        default): every power of two from 2 to ``gpus_per_node`` that
        divides the routed experts, so that an EP x ETP group of ETP 1
        stays inside one node's NVLink, as Megatron-Core's MoE guide
        advises for the all-to-all-heavy EP groups [20]_. Each
        offered E must divide the experts and E x etp the config's D T C.
    probs_bytes : float
        Bytes per routed copy of the router probabilities sent with the
        dispatch (fp32 in Megatron's all-to-all dispatcher).
    """

    cp_algorithm: str = "p2p"
    cp_load_balance: bool = True
    cp_vision: bool = False
    cp_degrees: tuple[int, ...] = (1, 2, 4, 8)
    cp_min_tokens: int = 8192
    moe_imbalance: float = 1.0
    capacity_factor: float | None = None
    ep_overlap: float = 0.0
    ep_dedup: float = 1.0
    alltoall_links: str = "max"
    etp_degrees: tuple[int, ...] = (1,)
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
            elif key == "alltoall_links":
                if value not in ("max", "sum"):
                    raise ProblemError(f"must be max or sum, got {value!r}", path=where)
            elif key in ("cp_load_balance", "cp_vision"):
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
                if key != "ep_degrees" and (not value or 1 not in value):
                    raise ProblemError(f"must be positive integers including 1, got {list(value)!r}", path=where)
            elif key == "cp_min_tokens":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise ProblemError(f"must be a positive integer, got {value!r}", path=where)
            elif key == "capacity_factor":
                if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                    raise ProblemError(f"must be a positive number or null (dropless), got {value!r}", path=where)
            else:
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    raise ProblemError(f"must be a non-negative number, got {value!r}", path=where)
                if key == "moe_imbalance" and value < 1:
                    raise ProblemError(f"must be >= 1 (the busiest rank over the mean), got {value!r}", path=where)
                if key in ("ep_overlap", "ep_dedup") and not 0 <= value <= 1:
                    raise ProblemError(f"must be in [0, 1], got {value!r}", path=where)
            values[key] = value
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
