"""The general recursion's tables: only the (state, category, devices) combinations that can occur.

Contract
--------
:class:`Tables` holds the values ``V[a, level, z, c, D]`` of :mod:`.dp`'s
recursion (see its *The recursion* section). Per level, one flat float64
buffer holds, stage size after stage size (:class:`Layout`), an array
``(L + 1, states_i, cats_i, N + 1 - d_i)``: the placement states of size
index i, the incoming categories a size-i stage can receive (the automaton's
``incoming[i]``), and the suffix's devices from d_i up (a suffix whose first
stage has d_i devices has at least d_i). Every other combination is
infinite, and the buffer ends with one infinite sentinel that reads of
impossible combinations point to. Level 0 is never stored.

``H[pos, pair, D']``, what a size-i stage in front of the suffix at ``pos``
sees of a level (the least value over the transitions of each (new state,
outgoing category) pair), is a row of *shared keys* (:meth:`Tables.key_runs`,
read by :func:`.dp_kernels.shared_rows`): pairs of different sizes with the
same transitions (for instance "the next stage has j devices" for every
larger multi-node size) are reduced once per level, and ``Layout.hrow[i]``
picks size i's H out of those rows.

Memory: :func:`table_bytes` for the tables (``levels x (L + 1) x sum_i
states_i x cats_i x (N + 1 - d_i)`` doubles) and :func:`working_bytes` for
what a recursion holds beside them; :meth:`.dp.DPModel.recursion_bytes`
checks their sum against the budget before anything is allocated.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["CHUNK", "Layout", "Tables", "table_bytes", "working_bytes"]

INF = math.inf
CHUNK = 1 << 22  # elements of one temporary array of the vectorised kernels (32 MiB of float64)
TEMPORARIES = 8  # such arrays alive at once, at most


class Layout:
    """Where each (state, category, devices) lives: per size index i, the states of that size and the
    incoming categories a size-i stage can receive (slot = state position x categories + category position)."""

    def __init__(self, auto, sizes: tuple[int, ...], N: int):
        self.auto, self.sizes, self.N = auto, sizes, N
        Z, C = len(auto.states), len(auto.categories)
        self.groups = [i for i, d in enumerate(sizes) if d <= N]
        self.states: dict[int, np.ndarray] = {}
        self.cats: dict[int, np.ndarray] = {}
        self.zloc = np.full(Z, -1)
        self.cloc = np.full((len(sizes), C), -1)
        for i in self.groups:
            zs = np.flatnonzero(auto.size_of == i)
            cs = np.concatenate([np.arange(lo, hi) for lo, hi in auto.incoming[i]])
            self.states[i], self.cats[i] = zs, cs
            self.zloc[zs] = np.arange(len(zs))
            self.cloc[i, cs] = np.arange(len(cs))
        self.trans_sorted: dict = {}
        self.pairs = {i: self._pairs(i) for i in self.groups}
        # one flat buffer per level: size group after size group (then one infinite sentinel)
        self.base, total = {}, 0
        for i in self.groups:
            self.base[i] = total
            total += self._slots(i) * (N + 1 - sizes[i])
        self.stride = {i: self._slots(i) * (N + 1 - sizes[i]) for i in self.groups}  # per first layer
        self.flat_size = total  # per first layer
        self._share()

    def _share(self) -> None:
        """Pairs of different stage sizes with the same transitions (e.g. "the next stage has j < i devices"
        for every larger size i) are reduced once: ``keys`` lists each distinct set's (source states,
        outgoing categories) and the widest suffix-device range asked of it; ``pair_key[i]`` maps size
        i's pairs to them; ``hrow[i]`` (pairs, D1_i) says where each H entry sits in a row of all keys."""
        index: dict = {}
        self.keys: list[tuple[np.ndarray, np.ndarray]] = []
        width: list[int] = []
        self.pair_key = {}
        for i in self.groups:
            zp, co, starts = self.trans_sorted[i]
            ends = np.r_[starts[1:], len(zp)]
            ids = []
            for lo, hi in zip(starts, ends):
                k = (tuple(zp[lo:hi]), tuple(co[lo:hi]))
                if k not in index:
                    index[k] = len(self.keys)
                    self.keys.append((zp[lo:hi], co[lo:hi]))
                    width.append(0)
                u = index[k]
                width[u] = max(width[u], self.N + 1 - self.sizes[i])
                ids.append(u)
            self.pair_key[i] = np.array(ids, dtype=np.int64)
        self.key_width = np.array(width, dtype=np.int64)
        self.key_offset = np.r_[0, np.cumsum(self.key_width)[:-1]].astype(np.int64)
        self.row_length = int(self.key_width.sum())
        self.hrow = {}
        for i in self.groups:
            D1 = self.N + 1 - self.sizes[i]
            self.hrow[i] = self.key_offset[self.pair_key[i]][:, None] + np.arange(D1)[None, :]

    def _slots(self, i: int) -> int:
        return len(self.states[i]) * len(self.cats[i])

    def shape(self, L: int, i: int) -> tuple[int, int, int, int]:
        return (L + 1, len(self.states[i]), len(self.cats[i]), self.N + 1 - self.sizes[i])

    def _pairs(self, i: int):
        """Size-i transitions grouped by (new state, outgoing category): the pairs a stage chooses among.

        Returns (pair_zn, pair_co, starts, zn_starts): each pair's new state and outgoing category, where
        its transitions start in the sorted transitions, and where each new state's pairs start.
        """
        auto = self.auto
        zp, zn, co = auto.trans[i]
        keep = np.isin(auto.size_of[zp], self.groups)
        zp, zn, co = zp[keep], zn[keep], co[keep]
        order = np.lexsort((co, zn))
        zp, zn, co = zp[order], zn[order], co[order]
        keys = zn * len(auto.categories) + co
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else np.zeros(0, int)
        self.trans_sorted[i] = (zp, co, starts)
        pair_zn, pair_co = zn[starts], co[starts]
        zn_starts = np.flatnonzero(np.r_[True, pair_zn[1:] != pair_zn[:-1]]) if len(pair_zn) else np.zeros(0, int)
        return pair_zn, pair_co, starts, zn_starts


def table_bytes(layout: Layout, L: int, levels: int) -> int:
    """Bytes of the tables of ``levels`` levels (one flat buffer each, with its sentinel)."""
    return 8 * (layout.flat_size * (L + 1) + 1) * levels


def working_bytes(layout: Layout, L: int) -> int:
    """Bytes :func:`.dp_recursion.fill` holds beside the tables at most: a level's rows of shared keys
    and one size's H from them, or the bucket level's H rows of every size (and their flags), plus the
    kernels' temporaries (each at most ``CHUNK`` elements)."""
    rows = L + 1
    per_size = [layout.hrow[i].size for i in layout.groups]
    level = rows * (layout.row_length + max(per_size, default=0))
    bucket = rows * sum(per_size) + rows * sum(layout.hrow[i].shape[0] for i in layout.groups) // 8 + layout.row_length
    return 8 * (max(level, bucket) + TEMPORARIES * CHUNK)


class Tables:
    """The values of one recursion: ``tab[level][i]`` of shape ``(L + 1, states_i, cats_i, N + 1 - d_i)``."""

    def __init__(self, layout: Layout, L: int):
        self.layout, self.L = layout, L
        self.tab: list[dict[int, np.ndarray]] = [{}]  # level 0 holds nothing
        self.flat: list[np.ndarray | None] = [None]
        self._index: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None

    def reset(self, top: int) -> None:
        """Levels 1..top allocated the first time they are needed, each with its first layers from
        ``L - level + 1`` on (where no suffix of that many stages starts) infinite; a recursion clears
        level 1 and writes the other first layers of the levels it fills whole (:mod:`.dp_recursion`),
        so a level keeps what the last recursion that reached it wrote."""
        lay, rows = self.layout, self.L + 1
        while len(self.tab) <= top:
            level = len(self.tab)
            flat = np.empty(rows * lay.flat_size + 1)
            flat[-1] = INF
            views = {}
            for i in lay.groups:
                lo = rows * lay.base[i]
                views[i] = flat[lo : lo + rows * lay.stride[i]].reshape(self.layout.shape(self.L, i))
                views[i][max(self.L - level + 1, 0) :] = INF
            self.flat.append(flat)
            self.tab.append(views)
        self.top = top

    def clear_rows(self, level: int, first: int) -> None:
        """Set the first layers ``first..L`` of every size group of ``level`` to infinity."""
        for view in self.tab[level].values():
            view[first:] = INF

    def key_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """How a row of all shared keys is read from a level's flat buffer: per key (``starts``, one
        more than keys) its transitions, each a *run* -- key column D' (D' >= ``d``) at first layer pos
        is entry ``base + pos * stride + D' - d`` of the transition's source (state, category); the
        row holds the least over a key's runs (infinite where none reaches)."""
        if self._index is None:
            lay, rows = self.layout, self.L + 1
            base, stride, d, starts = [], [], [], [0]
            for zp, co in lay.keys:
                ip = lay.auto.size_of[zp]
                size = np.array(lay.sizes)[ip]
                slot = lay.zloc[zp] * np.array([len(lay.cats[j]) for j in ip]) + lay.cloc[ip, co]
                base.append(rows * np.array([lay.base[j] for j in ip]) + slot * (lay.N + 1 - size))
                stride.append(np.array([lay.stride[j] for j in ip]))
                d.append(size)
                starts.append(starts[-1] + len(zp))

            def cat(parts):
                return np.ascontiguousarray(np.concatenate(parts), dtype=np.int64) if parts else np.zeros(0, np.int64)

            self._index = (cat(base), cat(stride), cat(d), np.array(starts, dtype=np.int64))
        return self._index

    def value(self, a: int, level: int, z: int, c: int, D: int) -> float:
        lay = self.layout
        if level < 1 or level > self.top:
            return INF
        i = int(lay.auto.size_of[z])
        if i not in lay.states:
            return INF
        cl = lay.cloc[i, c]
        Di = D - lay.sizes[i]
        if cl < 0 or Di < 0:
            return INF
        return float(self.tab[level][i][a, lay.zloc[z], cl, Di])

    def first(self, level: int, D: int) -> np.ndarray:
        """Over every state z: the value of the whole pipeline (a = 0, category 0, D devices) at ``level``."""
        lay = self.layout
        out = np.full(len(lay.auto.states), INF)
        if level > self.top:
            return out
        for i in lay.groups:
            Di = D - lay.sizes[i]
            cl = lay.cloc[i, 0]
            if Di >= 0 and cl >= 0:
                out[lay.states[i]] = self.tab[level][i][0, :, cl, Di]
        return out
