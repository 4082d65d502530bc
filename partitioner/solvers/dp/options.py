"""How the DP values a stage when an estimate weighs two parts of its time apart (zb-h1, GPipe iteration).

Under those estimates a stage's configs are no longer "the fastest that
fits": a *spec* (:class:`ZeroBubbleSpec`, :class:`GPipeSpec`) says what a
stage with one of its Pareto options and its transfers adds to the sum and
what the threshold bounds, so that the recursion of :mod:`.solver` stays exact.

More (the detail of this module): ``docs/internals/solvers.md``, section ``partitioner.solvers.dp.options``.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["ZeroBubbleSpec", "GPipeSpec", "Spec"]

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
        part = np.where(G + self.s * xs <= lim, U + np.asarray(xo)[..., None], INF).min(axis=-1)
        return (part + 0.0) + xi

    def choices(self, U, G, xo, xi: float, mode: str, lim: float):
        """The option each stage ``[k]`` (options ``U[k, f]``, ``G[k, f]``) with outgoing transfers
        ``xo[k, t]`` takes, as :meth:`value` values it: (option, cost, key, 0) arrays ``[k, t]``."""
        x = (xo + xi)[..., None]
        g = G[:, None, :] + self.s * x
        f = np.argmin(g if mode == "minmax" else np.where(g <= lim, x + U[:, None, :], INF), axis=-1)
        pick = f[..., None]
        cost = (x + np.take_along_axis(np.broadcast_to(U[:, None, :], g.shape), pick, axis=-1))[..., 0]
        return f, cost, np.take_along_axis(g, pick, axis=-1)[..., 0], np.zeros(f.shape)


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

    def value(self, low, F, B, xo, xi, mode: str, lim: float):
        # the parts as choices forms them, left to broadcast inside the ufuncs (no broadcast_arrays copies)
        fwd, bwd = F + np.asarray(xo)[..., None], B + np.asarray(xi)[..., None]
        key, ok = (bwd if self.part == "B" else fwd), fwd <= self.f_cap
        if mode == "minmax":
            out = np.where(ok, key, INF).min(axis=-1)
        else:
            out = (np.where(ok & (key <= lim), fwd + B, INF).min(axis=-1) + 0.0) + xi
        return np.broadcast_to(out, np.broadcast_shapes(fwd.shape, bwd.shape)[:-1])

    def choices(self, F, B, xo, xi: float, mode: str, lim: float):
        """The option each stage ``[k]`` (options ``F[k, f]``, ``B[k, f]``) with outgoing transfers
        ``xo[k, t]`` takes, as :meth:`value` values it: (option, cost t, key, F + xo) arrays ``[k, t]``."""
        fwd = F[:, None, :] + np.asarray(xo)[..., None]
        bwd = np.broadcast_to(B[:, None, :] + xi, fwd.shape)
        key = bwd if self.part == "B" else fwd
        ok = fwd <= self.f_cap
        score = np.where(ok, key, INF) if mode == "minmax" else np.where(ok & (key <= lim), fwd + bwd, INF)
        pick = np.argmin(score, axis=-1)[..., None]

        def at(x):
            return np.take_along_axis(x, pick, axis=-1)[..., 0]

        return pick[..., 0], at(fwd) + at(bwd), at(key), at(fwd)


Spec = ZeroBubbleSpec | GPipeSpec  # what a recursion values stages by under a two-part estimate
