"""The general recursion's tables: per level, the least value of each *shared key* of its states.

:class:`Tables` keeps, per level of one recursion, only each *shared key*'s
least value per first layer and suffix devices (states whose transitions
coincide share a key, :meth:`Tables.key_runs`), with the finite span of each
key's columns; :class:`Layout` says where each (state, category, devices)
value lives in a first layer's row, which the kernels form in a scratch row.
:func:`table_bytes` and :func:`working_bytes` size them.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.tables``.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["Layout", "Tables", "key_rows", "table_bytes", "working_bytes"]

INF = math.inf


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
        # one row per first layer: size group after size group
        self.base, total = {}, 0
        for i in self.groups:
            self.base[i] = total
            total += self._slots(i) * (N + 1 - sizes[i])
        self.flat_size = total  # values per first layer
        self._share()

    def _share(self) -> None:
        """Pairs of different stage sizes with the same transitions (e.g. "the next stage has j < i devices"
        for every larger size i) are reduced once: ``keys`` lists each distinct set's (source states,
        outgoing categories) and the widest suffix-device range asked of it; ``pair_key[i]`` maps size
        i's pairs to them; ``key_offset`` is where each key's columns start in a row of all keys."""
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


def key_rows(L: int, level: int) -> int:
    """The first layers a level's keys are kept for: 0..L - level + 1 (no suffix of that many stages
    starts later; the last of them is read, infinite, by the level above's last stages)."""
    return max(L - level + 2, 1)


def table_bytes(layout: Layout, L: int, levels: int, keep_rows: bool = False) -> int:
    """Bytes of the tables of ``levels`` levels: per level the keys' rows and spans and the whole row of
    the first layer 0 (every row with ``keep_rows``)."""
    per_row = layout.row_length + 2 * len(layout.key_width)
    keys = sum(key_rows(L, level) for level in range(1, levels + 1)) * per_row
    kept = levels * ((L + 1) if keep_rows else 1) * (layout.flat_size + 1)
    return 8 * (keys + kept)


def working_bytes(layout: Layout, L: int, N: int, threads: int) -> int:
    """Bytes :func:`.recursion.fill` holds beside the tables at most: the bucket level's own input
    (a copy of the keys' rows and spans), and per thread a scratch row and the kernels' accumulators (two
    of the largest size group's states x categories x devices)."""
    rows = L + 1
    bucket = rows * (layout.row_length + 2 * len(layout.key_width))
    cells = max((len(layout.states[i]) * len(layout.cats[i]) for i in layout.groups), default=1)
    per_thread = layout.flat_size + 1 + 2 * cells * (N + 1)
    return 8 * (bucket + max(threads, 1) * per_thread)


class Tables:
    """The keys' rows of one recursion: ``R[level]`` of shape ``(key_rows(L, level), row_length)`` with the
    spans ``lo[level]``, ``hi[level]`` of shape ``(key_rows(L, level), keys)``, and ``first_rows[level]``, the row of the first
    layer 0; with ``keep_rows`` every row, ``rows[level]`` of shape ``(L + 1) x flat_size`` (plus a sentinel)."""

    def __init__(self, layout: Layout, L: int, keep_rows: bool = False):
        self.layout, self.L, self.keep_rows = layout, L, keep_rows
        self.R: list[np.ndarray | None] = [None]  # level 0 holds nothing
        self.lo: list[np.ndarray | None] = [None]
        self.hi: list[np.ndarray | None] = [None]
        self.first_rows: list[np.ndarray | None] = [None]
        self.rows: list[np.ndarray | None] = [None]
        self._index: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        self.top = 0

    def reset(self, top: int) -> None:
        """Levels 1..top allocated the first time they are needed, infinite; a recursion writes the first
        layers 0..L - level of each level it fills (no suffix of that many stages starts later), so a level
        keeps what the last recursion that reached it wrote."""
        lay, rows = self.layout, self.L + 1
        nkeys = len(lay.key_width)
        while len(self.R) <= top:
            level = len(self.R)
            n = key_rows(self.L, level)
            # every fill that reaches a level writes whole rows 0..L - level (each key's columns, kernels'
            # ``_shared_row``) and, when there is such a row, the whole first row: only the rows no fill
            # writes are set infinite here (a fill over a fresh table was the largest cost of dp at 1,024 GPUs)
            written = max(self.L - level + 1, 0)
            R = np.empty((n, lay.row_length))
            R[written:] = INF
            self.R.append(R)
            self.lo.append(np.zeros((n, nkeys), np.int64))
            self.hi.append(np.zeros((n, nkeys), np.int64))
            self.first_rows.append(np.empty(lay.flat_size) if written else np.full(lay.flat_size, INF))
            if self.keep_rows:
                flat = np.full(rows * lay.flat_size + 1, INF)
                self.rows.append(flat)
            else:
                self.rows.append(None)
        self.top = top

    def held_bytes(self) -> int:
        """The bytes of the levels allocated so far."""
        return sum(x.nbytes for group in (self.R, self.lo, self.hi, self.first_rows, self.rows) for x in group
                   if x is not None)

    def key_runs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """How a row of all shared keys is read from a row of values: per key (``starts``, one more than
        keys) its transitions, each a *run* -- key column D' (D' >= ``d``) is entry ``base + D' - d`` of
        the row (the transition's source state and category); the key holds the least over its runs
        (infinite where none reaches). ``stride`` (unused by the kernels) is the row length."""
        if self._index is None:
            lay = self.layout
            base, stride, d, starts = [], [], [], [0]
            for zp, co in lay.keys:
                ip = lay.auto.size_of[zp]
                size = np.array(lay.sizes)[ip]
                slot = lay.zloc[zp] * np.array([len(lay.cats[j]) for j in ip]) + lay.cloc[ip, co]
                base.append(np.array([lay.base[j] for j in ip]) + slot * (lay.N + 1 - size))
                stride.append(np.full(len(zp), lay.flat_size))
                d.append(size)
                starts.append(starts[-1] + len(zp))

            def cat(parts):
                return np.ascontiguousarray(np.concatenate(parts), dtype=np.int64) if parts else np.zeros(0, np.int64)

            self._index = (cat(base), cat(stride), cat(d), np.array(starts, dtype=np.int64))
        return self._index

    def _row(self, a: int, level: int) -> np.ndarray | None:
        """The values of first layer a at ``level`` (kept for a = 0, or every a with ``keep_rows``)."""
        if level < 1 or level > self.top:
            return None
        if self.keep_rows:
            flat = self.rows[level]
            assert flat is not None
            n = self.layout.flat_size
            return flat[a * n : (a + 1) * n]
        return self.first_rows[level] if a == 0 else None

    def value(self, a: int, level: int, z: int, c: int, D: int) -> float:
        """V[a, level, z, c, D] from a kept row (first layer 0, or every one with ``keep_rows``)."""
        lay = self.layout
        row = self._row(a, level)
        if row is None:
            if level < 1 or level > self.top:
                return INF
            raise LookupError(f"dp: the row of first layer {a} is not kept (only the keys' least values)")
        i = int(lay.auto.size_of[z])
        if i not in lay.states:
            return INF
        cl = lay.cloc[i, c]
        Di = D - lay.sizes[i]
        if cl < 0 or Di < 0:
            return INF
        D1 = lay.N + 1 - lay.sizes[i]
        return float(row[lay.base[i] + (lay.zloc[z] * len(lay.cats[i]) + cl) * D1 + Di])

    def key_value(self, level: int, pos: np.ndarray, key: int, D: int) -> np.ndarray:
        """``R[level][pos, key, D]`` over the positions ``pos`` (infinite outside the key's columns)."""
        lay = self.layout
        pos = np.asarray(pos)
        if level < 1 or level > self.top or D < 0 or D >= lay.key_width[key]:
            return np.full(pos.shape, INF)
        R = self.R[level]
        assert R is not None
        inside = pos < R.shape[0]
        out = np.full(pos.shape, INF)
        out[inside] = R[pos[inside], lay.key_offset[key] + D]
        return out

    def first(self, level: int, D: int) -> np.ndarray:
        """Over every state z: the value of the whole pipeline (a = 0, category 0, D devices) at ``level``."""
        lay = self.layout
        out = np.full(len(lay.auto.states), INF)
        row = self._row(0, level)
        if row is None:
            return out
        for i in lay.groups:
            Di = D - lay.sizes[i]
            cl = lay.cloc[i, 0]
            if Di >= 0 and cl >= 0:
                D1 = lay.N + 1 - lay.sizes[i]
                block = row[lay.base[i] : lay.base[i] + len(lay.states[i]) * len(lay.cats[i]) * D1]
                out[lay.states[i]] = block.reshape(len(lay.states[i]), len(lay.cats[i]), D1)[:, cl, Di]
        return out

    def entries(self, level: int) -> dict[int, np.ndarray]:
        """With ``keep_rows``: per size index i, the level's values as ``(L + 1, states_i, cats_i, N + 1 - d_i)``."""
        flat = self.rows[level]
        assert flat is not None, "dp: entries() needs keep_rows"
        lay, n = self.layout, self.layout.flat_size
        table = flat[: (self.L + 1) * n].reshape(self.L + 1, n)
        out = {}
        for i in lay.groups:
            D1 = lay.N + 1 - lay.sizes[i]
            block = table[:, lay.base[i] : lay.base[i] + len(lay.states[i]) * len(lay.cats[i]) * D1]
            out[i] = block.reshape(self.L + 1, len(lay.states[i]), len(lay.cats[i]), D1)
        return out
