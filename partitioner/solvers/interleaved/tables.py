"""The cost of a chunk of the interleaved space on one mesh, from prefix sums: its Pareto options.

A chunk (layers ``a..b``) on a group's mesh runs one config per segment
(:meth:`~partitioner.problem.Problem.segments`), each config of that mesh
present on every layer of its segment. What the chunk then costs is three
numbers: its compute (sum of fwd + bwd), its weight bytes (less the tied
bytes of a tie held inside the chunk, format v3) and its activation bytes
per microbatch. Every objective of the space is non-decreasing in the
compute and the memory rule in the bytes, so only the tuples no other
tuple matches or beats in all three are kept (:func:`pareto`): some
optimum uses only those.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.interleaved.tables``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate

from ...problem import Layout, Problem

__all__ = ["ChunkChoice", "ChunkTables", "pareto"]


@dataclass(frozen=True)
class ChunkChoice:
    """One way to run a chunk on a mesh: its configs (one per segment) and what they cost."""

    compute_ms: float
    weight_bytes: int
    act_bytes: int
    configs: tuple[Layout, ...]


def pareto(choices: list[ChunkChoice]) -> tuple[ChunkChoice, ...]:
    """The choices no other matches or beats in compute, weight and activations; by compute, then weight.

    Of equal triples the first in the given order is kept (config order
    breaks ties, as :func:`.space.chunk_options` does).
    """
    ordered = sorted(enumerate(choices), key=lambda ic: (ic[1].compute_ms, ic[1].weight_bytes, ic[1].act_bytes, ic[0]))
    kept: list[ChunkChoice] = []
    for _, c in ordered:
        if not any(k.weight_bytes <= c.weight_bytes and k.act_bytes <= c.act_bytes for k in kept):
            kept.append(c)  # every kept one has compute <= c's, so it dominates c iff its bytes are <= too
    return tuple(kept)


@dataclass
class ChunkTables:
    """Pareto options of every chunk on every mesh of one group size, computed on demand and kept.

    Parameters
    ----------
    problem : Problem
    configs : sequence of Layout
        The configs of the group size (:func:`.space.group_configs`).
    """

    problem: Problem
    configs: tuple[Layout, ...]
    _time: dict = field(default_factory=dict, repr=False)
    _weight: dict = field(default_factory=dict, repr=False)
    _act: dict = field(default_factory=dict, repr=False)
    _missing: dict = field(default_factory=dict, repr=False)
    _cache: dict = field(default_factory=dict, repr=False)
    _segments: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        layers = self.problem.layers
        for k in self.configs:
            entries = [layer.costs.get(k) for layer in layers]
            self._time[k] = [0.0, *accumulate((e.fwd_ms + e.bwd_ms) if e else 0.0 for e in entries)]
            self._weight[k] = [0, *accumulate(e.weight_bytes if e else 0 for e in entries)]
            self._act[k] = [0, *accumulate(e.act_bytes if e else 0 for e in entries)]
            self._missing[k] = [0, *accumulate(0 if e else 1 for e in entries)]

    @property
    def meshes(self) -> tuple[tuple[int, ...], ...]:
        return tuple(dict.fromkeys(k.mesh for k in self.configs))

    def _segment(self, a: int, b: int, mesh: tuple[int, ...], tied_from: int) -> tuple[ChunkChoice, ...]:
        """The Pareto configs of segment ``a..b`` on ``mesh`` (ties whose partner is at or after ``tied_from`` counted once)."""
        key = (a, b, mesh, tied_from)
        found = self._segments.get(key)
        if found is not None:
            return found
        out = []
        ties = [(j, k) for j, k in self.problem.ties if a <= k <= b and j >= tied_from]
        for lay in self.configs:
            if lay.mesh != mesh or self._missing[lay][b + 1] - self._missing[lay][a]:
                continue
            weight = self._weight[lay][b + 1] - self._weight[lay][a]
            weight -= sum(self.problem.layers[k].costs[lay].tied_weight_bytes for _, k in ties)
            out.append(ChunkChoice(self._time[lay][b + 1] - self._time[lay][a], weight,
                                   self._act[lay][b + 1] - self._act[lay][a], (lay,)))
        found = self._segments[key] = pareto(out)
        return found

    def options(self, a: int, b: int, mesh: tuple[int, ...]) -> tuple[ChunkChoice, ...]:
        """The Pareto options of chunk ``a..b`` on ``mesh`` (empty when a segment has no config of it)."""
        key = (a, b, mesh)
        found = self._cache.get(key)
        if found is not None:
            return found
        combined: tuple[ChunkChoice, ...] = (ChunkChoice(0.0, 0, 0, ()),)
        for sa, sb in self.problem.segments(a, b):
            seg = self._segment(sa, sb, mesh, a)
            if not seg:
                combined = ()
                break
            combined = pareto([
                ChunkChoice(x.compute_ms + y.compute_ms, x.weight_bytes + y.weight_bytes, x.act_bytes + y.act_bytes,
                            x.configs + y.configs)
                for x in combined for y in seg
            ])
        self._cache[key] = combined
        return combined
