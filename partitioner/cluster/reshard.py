"""Cross-mesh resharding of an activation tensor [B, S, D] between two (dp, tp[, cp]) layouts.

Seed lesson 15: a vision encoder runs at dp 8 on 8 GPUs, the language model
at dp 2 x tp 4; at the boundary every GPU of the language mesh needs the
vision features of its data-parallel group's samples, cut along the feature
dimension into tp slices, one slice per tensor-parallel rank. This module
computes which device sends which block to which device, how many bytes
really cross between distinct devices, how long that takes on the cluster
graph, and executes the exchange on numpy arrays (forward) and its
transpose (backward).

More (the detail of this module): ``docs/internals/cluster.md``, section ``partitioner.cluster.reshard``.
"""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from ..problem import Cluster
from .topology import bandwidth, transfer_ms

__all__ = [
    "Sharding",
    "Transfer",
    "ReshardPlan",
    "plan_reshard",
    "reshard_time_ms",
    "execute_forward",
    "execute_backward",
    "lesson15_volume",
    "segment_reshard_ms",
    "stage_reshard_ms",
]


def _split(n: int, parts: int, index: int) -> tuple[int, int]:
    """Balanced contiguous split of ``range(n)`` into ``parts``: the ``index``-th piece."""
    return index * n // parts, (index + 1) * n // parts


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> tuple[int, int] | None:
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    return (lo, hi) if lo < hi else None


@dataclass(frozen=True)
class Sharding:
    """A (dp, tp, cp) layout on ``devices``; rank ``(i_dp * cp + i_cp) * tp + i_tp`` sits on ``devices[rank]``."""

    dp: int
    tp: int
    devices: tuple[int, ...]
    cp: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(int(d) for d in self.devices))
        if self.dp < 1 or self.tp < 1 or self.cp < 1:
            raise ValueError(f"dp, tp and cp must be >= 1, got dp={self.dp}, tp={self.tp}, cp={self.cp}")
        if len(self.devices) != self.size:
            raise ValueError(f"a {self.name} layout needs {self.size} devices, got {len(self.devices)}")
        if len(set(self.devices)) != len(self.devices):
            raise ValueError(f"devices must be distinct, got {list(self.devices)}")

    @classmethod
    def on(cls, dp: int, tp: int, first_device: int = 0, cp: int = 1) -> "Sharding":
        """The layout on the contiguous devices ``first_device .. first_device + dp*tp*cp - 1``."""
        return cls(dp, tp, tuple(range(first_device, first_device + dp * tp * cp)), cp)

    @property
    def size(self) -> int:
        return self.dp * self.tp * self.cp

    @property
    def name(self) -> str:
        return f"dp{self.dp}tp{self.tp}" + (f"cp{self.cp}" if self.cp != 1 else "")

    def coords(self, rank: int) -> tuple[int, int, int]:
        """``(i_dp, i_cp, i_tp)`` of ``rank``."""
        rest, i_tp = divmod(rank, self.tp)
        i_dp, i_cp = divmod(rest, self.cp)
        return i_dp, i_cp, i_tp

    def block3(self, rank: int, shape: tuple[int, int, int]) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        """The (batch, sequence, feature) index ranges that ``rank`` holds of a tensor of ``shape``."""
        B, S, D = shape
        i_dp, i_cp, i_tp = self.coords(rank)
        return _split(B, self.dp, i_dp), _split(S, self.cp, i_cp), _split(D, self.tp, i_tp)

    def block(self, rank: int, shape: tuple[int, int, int]) -> tuple[tuple[int, int], tuple[int, int]]:
        """The (batch, feature) index ranges that ``rank`` holds of a tensor of ``shape`` (its
        positions are :meth:`block3`'s middle range: all of them when cp = 1)."""
        b, _, d = self.block3(rank, shape)
        return b, d

    def block_shape(self, rank: int, shape: tuple[int, int, int]) -> tuple[int, int, int]:
        (b0, b1), (s0, s1), (d0, d1) = self.block3(rank, shape)
        return (b1 - b0, s1 - s0, d1 - d0)


@dataclass(frozen=True)
class Transfer:
    """One block moving from source rank ``src_rank`` (device ``src``) to destination rank ``dst_rank``.

    ``batch``, ``features`` and ``positions`` are global index ranges
    [start, stop); ``positions`` None means all S positions (both sides cp = 1).
    """

    src: int
    dst: int
    src_rank: int
    dst_rank: int
    batch: tuple[int, int]
    features: tuple[int, int]
    nbytes: int
    positions: tuple[int, int] | None = None

    @property
    def local(self) -> bool:
        """True when the block stays on its device (no communication)."""
        return self.src == self.dst


@dataclass(frozen=True)
class ReshardPlan:
    """Every block of the exchange from ``source`` to ``dest`` for a tensor of ``shape``."""

    source: Sharding
    dest: Sharding
    shape: tuple[int, int, int]
    dtype_bytes: int
    transfers: tuple[Transfer, ...]

    @property
    def total_bytes(self) -> int:
        return sum(t.nbytes for t in self.transfers)

    @property
    def cross_bytes(self) -> int:
        """Bytes that move between distinct devices."""
        return sum(t.nbytes for t in self.transfers if not t.local)

    @property
    def local_bytes(self) -> int:
        return self.total_bytes - self.cross_bytes

    def traffic(self) -> dict[tuple[int, int], int]:
        """Bytes per (sending device, receiving device), distinct devices only."""
        out: dict[tuple[int, int], int] = defaultdict(int)
        for t in self.transfers:
            if not t.local:
                out[(t.src, t.dst)] += t.nbytes
        return dict(out)

    def transpose(self) -> "ReshardPlan":
        """The backward exchange: every block goes back the way it came."""
        return ReshardPlan(
            source=self.dest,
            dest=self.source,
            shape=self.shape,
            dtype_bytes=self.dtype_bytes,
            transfers=tuple(
                Transfer(t.dst, t.src, t.dst_rank, t.src_rank, t.batch, t.features, t.nbytes, t.positions)
                for t in self.transfers
            ),
        )


def plan_reshard(shape: Sequence[int], source: Sharding, dest: Sharding, dtype_bytes: int = 2) -> ReshardPlan:
    """The transfer plan that turns ``source`` blocks of a [B, S, D] tensor into ``dest`` blocks.

    Parameters
    ----------
    shape : (B, S, D)
        The global tensor (B samples of S tokens of width D).
    source, dest : Sharding
        Layouts on device lists; they may share devices (colocated meshes).
    dtype_bytes : int
        Bytes per element (2 for bf16).

    Returns
    -------
    ReshardPlan
        One transfer per non-empty intersection of a source block with a
        destination block; together they cover the tensor exactly once.
    """
    if len(shape) != 3:
        raise ValueError(f"shape must be (B, S, D), got {tuple(shape)}")
    B, S, D = (int(v) for v in shape)
    if min(B, S, D) < 1:
        raise ValueError(f"every dimension must be >= 1, got {(B, S, D)}")
    if dtype_bytes < 1:
        raise ValueError(f"dtype_bytes must be >= 1, got {dtype_bytes}")
    full = (B, S, D)
    split_sequence = source.cp != 1 or dest.cp != 1
    transfers = []
    for r_dst in range(dest.size):
        db, ds, dd = dest.block3(r_dst, full)
        for r_src in range(source.size):
            sb, ss, sd = source.block3(r_src, full)
            b, q, d = _overlap(sb, db), _overlap(ss, ds), _overlap(sd, dd)
            if b is None or q is None or d is None:
                continue
            nbytes = (b[1] - b[0]) * (q[1] - q[0]) * (d[1] - d[0]) * dtype_bytes
            transfers.append(
                Transfer(source.devices[r_src], dest.devices[r_dst], r_src, r_dst, b, d, nbytes, q if split_sequence else None)
            )
    return ReshardPlan(source, dest, full, dtype_bytes, tuple(transfers))


def lesson15_volume(batch: int, seq: int, width: int, dp_source: int, dtype_bytes: int = 2) -> float:
    """Lesson 15's estimate ``B * S * D * (DP_V - 1) / DP_V * bytes`` (a uniform all-to-all)."""
    return batch * seq * width * (dp_source - 1) / dp_source * dtype_bytes


# --------------------------------------------------------------------------- time


def reshard_time_ms(plan: ReshardPlan, cluster: Cluster) -> float:
    """Time (ms) of the exchange on the cluster graph.

    Default graph: the busiest GPU port (exact in the fluid model, see the
    module notes). User topology: the largest cut bound over every sender,
    every receiver and every pair (a lower bound).
    """
    traffic = plan.traffic()
    if not traffic:
        return 0.0
    n = cluster.num_devices
    for src, dst in traffic:
        for d in (src, dst):
            if not 0 <= d < n:
                raise ValueError(f"device {d} is not on this cluster (devices 0..{n - 1})")
    if cluster.topology is None:
        return _port_time_ms(traffic, cluster)
    return _cut_time_ms(traffic, cluster)


def _port_time_ms(traffic: dict[tuple[int, int], int], cluster: Cluster) -> float:
    load: dict[tuple[int, str], int] = defaultdict(int)  # (gpu, port) -> bytes
    for (src, dst), nbytes in traffic.items():
        link = "nvlink" if cluster.node_of(src) == cluster.node_of(dst) else "nic"
        load[(src, link + "-out")] += nbytes
        load[(dst, link + "-in")] += nbytes
    worst = 0.0
    for (_, port), nbytes in load.items():
        gbps = cluster.intra_node_GBps if port.startswith("nvlink") else cluster.inter_node_GBps
        worst = max(worst, transfer_ms(nbytes, gbps))
    return worst


def _cut_time_ms(traffic: dict[tuple[int, int], int], cluster: Cluster) -> float:
    sends: dict[int, dict[int, int]] = defaultdict(dict)
    receives: dict[int, dict[int, int]] = defaultdict(dict)
    for (src, dst), nbytes in traffic.items():
        sends[src][dst] = nbytes
        receives[dst][src] = nbytes
    worst = 0.0
    for (src, dst), nbytes in traffic.items():
        worst = max(worst, transfer_ms(nbytes, bandwidth(cluster, [src], [dst])))
    for src, out in sends.items():
        worst = max(worst, transfer_ms(sum(out.values()), bandwidth(cluster, [src], list(out))))
    for dst, into in receives.items():
        worst = max(worst, transfer_ms(sum(into.values()), bandwidth(cluster, list(into), [dst])))
    return worst


# --------------------------------------------------------------------------- numpy executor


def _run(plan: ReshardPlan, shards: Sequence[np.ndarray]) -> list[np.ndarray]:
    src, dst, shape = plan.source, plan.dest, plan.shape
    if len(shards) != src.size:
        raise ValueError(f"expected {src.size} shards (one per rank of {src.name}), got {len(shards)}")
    arrays = [np.asarray(a) for a in shards]
    for r, a in enumerate(arrays):
        want = src.block_shape(r, shape)
        if a.shape != want:
            raise ValueError(f"shard {r} has shape {a.shape}, expected {want}")
    dtype = np.result_type(*arrays)
    out = [np.empty(dst.block_shape(r, shape), dtype=dtype) for r in range(dst.size)]
    for t in plan.transfers:
        (sb0, _), (ss0, _), (sd0, _) = src.block3(t.src_rank, shape)
        (db0, _), (ds0, _), (dd0, _) = dst.block3(t.dst_rank, shape)
        b, d = t.batch, t.features
        q = t.positions if t.positions is not None else (0, shape[1])
        piece = arrays[t.src_rank][b[0] - sb0 : b[1] - sb0, q[0] - ss0 : q[1] - ss0, d[0] - sd0 : d[1] - sd0]
        out[t.dst_rank][b[0] - db0 : b[1] - db0, q[0] - ds0 : q[1] - ds0, d[0] - dd0 : d[1] - dd0] = piece
    return out


def execute_forward(plan: ReshardPlan, shards: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Move activations: ``shards[r]`` is source rank r's block; returns each destination rank's block."""
    return _run(plan, shards)


def execute_backward(plan: ReshardPlan, grads: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The transpose: destination ranks' gradient blocks back to the source ranks that sent them."""
    return _run(plan.transpose(), grads)


# --------------------------------------------------------------------------- segments inside a stage (formats v2, v3)


def _mesh3(config) -> tuple[int, int, int]:
    """``(dp, tp, cp)`` of a config (anything with ``dp`` and ``tp``; ``cp`` 1 when it has none)."""
    return (config.dp, config.tp, getattr(config, "cp", 1))


def segment_reshard_ms(out_bytes: float, source, dest, device_ids: Sequence[int], cluster: Cluster) -> float:
    """The reshard time r between two segments of one stage (DESIGN.md, "Times v2").

    The last layer of the first segment hands ``out_bytes`` (the whole
    microbatch's tensor) from config ``source`` to config ``dest`` on the
    stage's own ``device_ids``: rank ``r`` of either layout sits on
    ``device_ids[r]``. r is the busiest port of that exchange (NVLink in/out at
    ``intra_node_GBps`` inside a node, NIC in/out at ``inter_node_GBps`` between
    nodes), the same fluid model as :func:`reshard_time_ms` on the default
    graph. Configs with the same ``(dp, tp, cp)`` (a change of variant, ep or
    etp only: expert parallelism never moves the activation between segments)
    cost 0.

    Parameters
    ----------
    out_bytes : float
    source, dest : partitioner.problem.Layout
        Anything with ``dp`` and ``tp`` (and ``cp``, 1 if absent); ``dp * tp * cp == len(device_ids)``.
    device_ids : sequence of int
    cluster : Cluster

    Returns
    -------
    float
        Milliseconds, paid once in the forward and once in the backward.
    """
    if _mesh3(source) == _mesh3(dest) or out_bytes == 0:
        return 0.0
    return _pattern_reshard_ms(out_bytes, source, dest, _node_pattern([cluster.node_of(d) for d in device_ids]), cluster)


def _pattern_reshard_ms(out_bytes: float, source, dest, pattern: tuple[int, ...], cluster: Cluster) -> float:
    """:func:`segment_reshard_ms` on ranks whose nodes are ``pattern`` (renumbered by first appearance)."""
    nvlink, nic, total = _port_elements(_mesh3(source), _mesh3(dest), pattern)
    unit = out_bytes / total  # bytes of one element of the model tensor below
    return max(transfer_ms(nvlink * unit, cluster.intra_node_GBps), transfer_ms(nic * unit, cluster.inter_node_GBps))


def stage_reshard_ms(out_bytes: float, source, dest, devices: int, cluster: Cluster) -> float:
    """:func:`segment_reshard_ms` for the placement the solvers emit.

    Solvers give a stage ids grouped by node in ascending order (a stage of
    at most ``gpus_per_node`` devices inside one node, a larger one whole
    nodes), so rank ``r`` sits on the stage's node ``r // gpus_per_node``:
    ids ``0 .. devices - 1`` have that pattern.
    """
    if _mesh3(source) == _mesh3(dest) or out_bytes == 0:
        return 0.0
    return _pattern_reshard_ms(out_bytes, source, dest, _canonical_pattern(devices, cluster.gpus_per_node), cluster)


@lru_cache(maxsize=256)
def _canonical_pattern(devices: int, gpus_per_node: int) -> tuple[int, ...]:
    """The node pattern of ids ``0 .. devices - 1``: rank r on node ``r // gpus_per_node``."""
    return tuple(r // gpus_per_node for r in range(devices))


def _node_pattern(nodes: Sequence[int]) -> tuple[int, ...]:
    """Nodes renumbered by first appearance: the reshard time depends only on which ranks share one."""
    seen: dict[int, int] = {}
    return tuple(seen.setdefault(n, len(seen)) for n in nodes)


@lru_cache(maxsize=4096)
def _port_elements(source: tuple[int, ...], dest: tuple[int, ...], pattern: tuple[int, ...]) -> tuple[int, int, int]:
    """Busiest NVLink port, busiest NIC port and total, in elements of a model tensor.

    ``source`` and ``dest`` are meshes ``(dp, tp)`` or ``(dp, tp, cp)``. The
    model tensor is [lcm(dp_s, dp_d), lcm(cp_s, cp_d), lcm(tp_s, tp_d)]:
    every block of both layouts is a whole number of its elements, so the
    element counts scale exactly to any ``out_bytes``.

    Closed form of :func:`plan_reshard`'s traffic on ranks ``0 .. n - 1``: the
    block rank ``(i, c, t)`` of the source sends rank ``(i', c', t')`` of the
    destination is the product of a batch overlap ``|rows_i & rows_i'|``, a
    sequence overlap ``|pos_c & pos_c'|`` and a feature overlap
    ``|cols_t & cols_t'|``, so the whole (sender, receiver) matrix is one
    outer product (the diagonal stays put) laid out in the rank order
    ``(i_dp * cp + i_cp) * tp + i_tp``; port loads are its row and column sums
    split by same node / other node. Exact integers.
    """
    n = len(pattern)
    dp_s, tp_s, cp_s = (tuple(source) + (1,))[:3]
    dp_d, tp_d, cp_d = (tuple(dest) + (1,))[:3]
    Sharding(dp_s, tp_s, tuple(range(n)), cp_s)  # the same checks as the plan (dp * tp * cp == n)
    Sharding(dp_d, tp_d, tuple(range(n)), cp_d)
    B, S, D = math.lcm(dp_s, dp_d), math.lcm(cp_s, cp_d), math.lcm(tp_s, tp_d)
    rows = _overlaps(B, dp_s, dp_d)  # (dp_s, dp_d)
    seqs = _overlaps(S, cp_s, cp_d)  # (cp_s, cp_d)
    cols = _overlaps(D, tp_s, tp_d)  # (tp_s, tp_d)
    count = np.einsum("ad,be,cf->abcdef", rows, seqs, cols).reshape(n, n)  # [sending rank, receiving rank]
    np.fill_diagonal(count, 0)
    node = np.asarray(pattern)
    same = node[:, None] == node[None, :]
    nvlink = np.where(same, count, 0)
    nic = count - nvlink
    return _busiest(nvlink), _busiest(nic), B * S * D


def _overlaps(n: int, parts_s: int, parts_d: int) -> np.ndarray:
    """``[i, i']``: the size of piece i of ``range(n)`` split into ``parts_s`` met with piece i' of ``parts_d``."""
    cut_s = np.arange(parts_s + 1, dtype=np.int64) * n // parts_s
    cut_d = np.arange(parts_d + 1, dtype=np.int64) * n // parts_d
    lo = np.maximum(cut_s[:-1, None], cut_d[None, :-1])
    hi = np.minimum(cut_s[1:, None], cut_d[None, 1:])
    return np.maximum(hi - lo, 0)


def _busiest(count: np.ndarray) -> int:
    """The largest row (bytes out) or column (bytes in) sum of a traffic matrix, 0 if empty."""
    return int(max(count.sum(axis=1).max(initial=0), count.sum(axis=0).max(initial=0)))
