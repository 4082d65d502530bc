"""How the DP values a stage when an estimate weighs two parts of its time apart (zb-h1, GPipe iteration).

Contract
--------
Under these estimates a stage's configs are no longer "the fastest that
fits": :meth:`.StageCosts.options` gives, per stage a..b, the Pareto-minimal
pairs ``(A_f, B_f)`` of its fitting config tuples, without transfers. A
*spec* says, for one recursion, what a stage with option f, outgoing transfer
``xo`` and incoming transfer ``xi`` adds to the sum (``cost``) and what is
bounded by the threshold or maximised (``key``):

* :class:`ZeroBubbleSpec` (options (u, W), k fixed): cost ``u + x`` and key
  ``g = (m - 1)(u + x) + k W`` with ``x = xo + xi``. The estimate is
  ``sum u + max g`` (:func:`partitioner.schedules.estimate`).
* :class:`GPipeSpec` (options (F, B) without sends): ``F + xo``, ``B + xi``;
  cost ``t = (F + xo) + (B + xi)``; key ``B + xi`` with every stage's
  ``F + xo`` at most a cap (or key ``F + xo``, uncapped). The estimate is
  ``sum t + (m - 1)(max F + max B)``.

Both are non-decreasing in each part of every stage, so some optimum uses
Pareto options only. ``value`` is what the recursion stores for a stage
(``minmax``: its least key; ``minsum``: its least cost over the options whose
key is at most the threshold, inf if none) and ``choice`` the option the walk
back takes; both form their sums in the same order, so the walk back finds
exactly the values the tables hold.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["ZeroBubbleSpec", "GPipeSpec"]

INF = math.inf


class ZeroBubbleSpec:
    """zb-h1 with the coefficient ``k`` of the stage counts in play (k = max(m - P + 1, 1))."""

    parts = "uw"
    free_shared = True  # without a threshold every option counts: the least sum of u does not depend on k

    def __init__(self, m: int, k: int, every_level: bool = False):
        self.s, self.k = m - 1, k
        self.key = ("zb-h1", k)
        self.every_level = every_level  # a floor for every k' >= k: g grows with k, so key k on every level

    def level_ok(self, level: int, m: int) -> bool:
        """Pipelines of ``level`` stages have this k (a bucket level is m or more stages: k = 1)."""
        return self.every_level or max(m - level + 1, 1) == self.k

    def prepare(self, U: np.ndarray, W: np.ndarray):
        """(least key over the options, U, G = (m - 1) U + k W) from the options on the last axis."""
        with np.errstate(invalid="ignore"):  # 0 x inf when m = 1: no option there
            G = np.where(np.isfinite(U), self.s * U + self.k * W, INF)
        return G.min(axis=-1), U, G

    def value(self, low, U, G, xo, xi, mode: str, lim: float):
        x = xo + xi
        if mode == "minmax":
            return low + self.s * x
        xs = np.asarray(x)[..., None]
        return np.where(G + self.s * xs <= lim, xs + U, INF).min(axis=-1)

    def choice(self, U, G, xo: float, xi: float, mode: str, lim: float) -> tuple[int, float, float, float]:
        """(option, cost, key, 0.0) of one stage, as :meth:`value` values it."""
        x = xo + xi
        g = G + self.s * x
        f = int(np.argmin(g)) if mode == "minmax" else int(np.argmin(np.where(g <= lim, x + U, INF)))
        return f, float(x + U[f]), float(g[f]), 0.0


class GPipeSpec:
    """GPipe: key ``B + xi`` with ``F + xo <= f_cap`` (``key="B"``), or key ``F + xo`` (``key="F"``)."""

    parts = "fb"
    free_shared = False  # the cap on F bounds even the unthresholded sum

    def __init__(self, key: str = "B", f_cap: float = INF):
        self.part, self.f_cap = key, f_cap
        self.key = ("gpipe", key)

    def level_ok(self, level: int, m: int) -> bool:
        return True

    def prepare(self, F: np.ndarray, B: np.ndarray):
        return (B if self.part == "B" else F).min(axis=-1), F, B

    def _parts(self, F, B, xo, xi):
        fwd, bwd = np.broadcast_arrays(F + np.asarray(xo)[..., None], B + np.asarray(xi)[..., None])
        key = bwd if self.part == "B" else fwd
        return fwd, bwd, key, fwd <= self.f_cap

    def value(self, low, F, B, xo, xi, mode: str, lim: float):
        # the parts as _parts forms them, left to broadcast inside the ufuncs (no broadcast_arrays copies)
        fwd, bwd = F + np.asarray(xo)[..., None], B + np.asarray(xi)[..., None]
        key, ok = (bwd if self.part == "B" else fwd), fwd <= self.f_cap
        if mode == "minmax":
            out = np.where(ok, key, INF).min(axis=-1)
        else:
            out = np.where(ok & (key <= lim), fwd + bwd, INF).min(axis=-1)
        return np.broadcast_to(out, np.broadcast_shapes(fwd.shape, bwd.shape)[:-1])

    def choice(self, F, B, xo: float, xi: float, mode: str, lim: float) -> tuple[int, float, float, float]:
        """(option, cost t, key, F + xo) of one stage, as :meth:`value` values it."""
        fwd, bwd, key, ok = self._parts(F, B, xo, xi)
        if mode == "minmax":
            f = int(np.argmin(np.where(ok, key, INF)))
        else:
            f = int(np.argmin(np.where(ok & (key <= lim), fwd + bwd, INF)))
        return f, float(fwd[f] + bwd[f]), float(key[f]), float(fwd[f])
