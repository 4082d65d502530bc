"""The seed lessons' classes, as thin facades over the package.

* :class:`AsymmetricPipelineScheduler` (lesson 16): ``simulate_1f1b_execution`` is
the forward-only flow shop of :mod:`partitioner.simulate.engine` (schedule
``forward``: the lesson's simulator, despite its name, replays forwards only);
``solve_optimal_layer_partition`` builds a v1 problem and solves it *exactly* with
:func:`partitioner.solve`, where the lesson used a greedy heuristic. *
:class:`CrossMeshTensorResharder` (lesson 15): ``forward_reshard`` and
``backward_reshard`` run the transfer plan of :mod:`partitioner.cluster.reshard`.

More (the detail of this module): ``docs/internals/partitioner.md``, section ``partitioner.compat``.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .cluster.reshard import ReshardPlan, Sharding, execute_backward, execute_forward, plan_reshard, segment_reshard_ms
from .plan import Stage
from .problem import Cluster, Layout, Problem, ProblemError
from .simulate.engine import simulate_times
from .solvers import solve

__all__ = ["AsymmetricPipelineScheduler", "CrossMeshTensorResharder", "layer_partition_problem"]

# The lesson's cluster is abstract; any capacity works since every byte count is zero.
_GPU_MEMORY_BYTES = 80 * 2**30


def layer_partition_problem(
    total_layers: int,
    layer_cost: float,
    s0_fixed_cost: float,
    s_tail_fixed_cost: float,
    num_stages: int,
    microbatches: int = 8,
) -> Problem:
    """Lesson 16's rebalancing question as a v1 problem.

    A head layer ``vit`` with the fixed stage-0 cost, ``total_layers`` layers
    ``llm.i`` of ``layer_cost`` each, and a tail layer ``action_head`` with
    the tail cost; one node of ``num_stages`` GPUs, exactly ``num_stages``
    stages, forward times only (``bwd_ms`` 0), no bytes anywhere, objective
    ``bottleneck``. ``examples/rebalance_4gpu.json`` is this problem for the
    lesson's numbers (32, 2.0, 16.0, 8.0, 4).
    """
    layers = [_layer("vit", "vision", s0_fixed_cost)]
    layers += [_layer(f"llm.{i}", "llm", layer_cost) for i in range(total_layers)]
    layers.append(_layer("action_head", "action", s_tail_fixed_cost))
    doc = {
        "version": 1,
        "name": "seed-lesson16-rebalance",
        "cluster": {
            "nodes": 1,
            "gpus_per_node": num_stages,
            "gpu_memory_bytes": _GPU_MEMORY_BYTES,
            "intra_node_GBps": 450.0,
            "inter_node_GBps": 50.0,
        },
        "training": {"microbatches": microbatches, "objective": "bottleneck"},
        "stages": num_stages,
        "layers": layers,
    }
    return Problem.from_dict(doc)


def _layer(name: str, module: str, fwd_ms: float) -> dict:
    cost = {"fwd_ms": fwd_ms, "bwd_ms": 0.0, "weight_bytes": 0, "act_bytes": 0}
    return {"name": name, "module": module, "out_bytes": 0, "costs": {"dp1tp1": cost}}


class AsymmetricPipelineScheduler:
    """Lesson 16's scheduler: flow-shop replay and exact layer rebalancing.

    Parameters
    ----------
    method : str
        The exact solver :meth:`solve_optimal_layer_partition` uses.
    """

    def __init__(self, method: str = "dp"):
        self.method = method

    def simulate_1f1b_execution(self, stage_latencies: Sequence[float], num_microbatches: int) -> tuple[float, float]:
        """Forward-only flow shop: ``(total time, bubble ratio)``.

        Every stage takes the microbatches in order; a microbatch starts on
        stage p when stage p is free and it has left stage p-1. The bubble is
        ``1 - m * sum(t) / (P * total)``.
        """
        sim = simulate_times(list(stage_latencies), None, int(num_microbatches), "forward")
        return sim.makespan_ms, sim.bubble_ratio

    def solve_optimal_layer_partition(
        self,
        total_layers: int,
        layer_cost: float,
        s0_fixed_cost: float,
        s_tail_fixed_cost: float,
        num_stages: int,
    ) -> list[int]:
        """LLM layers per stage minimizing the slowest stage (an exact solve).

        Stage 0 carries the head cost, the last stage the tail cost. Unlike
        the lesson's greedy, which gives every stage at least one LLM layer,
        the first and last stages may hold none when that is optimal (their
        fixed cost still makes them non-empty).
        """
        try:
            problem = layer_partition_problem(total_layers, layer_cost, s0_fixed_cost, s_tail_fixed_cost, num_stages)
        except ProblemError as err:
            raise ValueError(f"cannot build the rebalancing problem: {err}") from None
        result = solve(problem, method=self.method)
        if result.plan is None:
            raise ValueError(f"no partition found ({result.status}): {result.message}")
        return [
            sum(1 for i in stage.layers if problem.layers[i].module == "llm") for stage in result.plan.stages
        ]


class CrossMeshTensorResharder:
    """Lesson 15's resharder between a vision mesh (dp_v, tp_v) and a language mesh (dp_l, tp_l).

    Both meshes use the same ``num_gpus`` devices (colocated) unless
    ``vision_devices`` / ``language_devices`` say otherwise. Vision rank r
    holds its samples' features (a 1/tp_v slice when tp_v > 1, see
    :mod:`partitioner.cluster.reshard`); language rank ``i_dp * tp_l + i_tp`` gets its
    data group's samples, feature slice ``i_tp``.
    """

    def __init__(
        self,
        num_gpus: int = 8,
        dp_v: int = 8,
        tp_v: int = 1,
        dp_l: int = 2,
        tp_l: int = 4,
        *,
        vision_devices: Sequence[int] | None = None,
        language_devices: Sequence[int] | None = None,
    ):
        if dp_v * tp_v != num_gpus:
            raise ValueError(f"the vision mesh dp_v*tp_v = {dp_v}*{tp_v} must equal num_gpus = {num_gpus}")
        if dp_l * tp_l != num_gpus:
            raise ValueError(f"the language mesh dp_l*tp_l = {dp_l}*{tp_l} must equal num_gpus = {num_gpus}")
        self.num_gpus = num_gpus
        self.dp_v, self.tp_v, self.dp_l, self.tp_l = dp_v, tp_v, dp_l, tp_l
        self.vision = Sharding(dp_v, tp_v, tuple(vision_devices if vision_devices is not None else range(num_gpus)))
        self.language = Sharding(dp_l, tp_l, tuple(language_devices if language_devices is not None else range(num_gpus)))

    def plan(self, batch: int, seq: int, width: int, dtype_bytes: int = 2) -> ReshardPlan:
        """The forward transfer plan for a global [batch, seq, width] tensor."""
        return plan_reshard((batch, seq, width), self.vision, self.language, dtype_bytes)

    @property
    def configs(self) -> tuple[Layout, Layout]:
        """The two segments' configs: vision ``dp{dp_v}tp{tp_v}``, then language ``dp{dp_l}tp{tp_l}``."""
        return Layout(self.dp_v, self.tp_v), Layout(self.dp_l, self.tp_l)

    def _colocated_devices(self) -> tuple[int, ...]:
        if self.vision.devices != self.language.devices:
            raise ValueError(
                "the meshes are not colocated (vision_devices != language_devices): that is two pipeline "
                "stages with a send between them, not one stage with two segments"
            )
        return self.vision.devices

    def stage(self, first_layer: int, last_layer: int, variants: tuple[str, str] = ("", "")) -> Stage:
        """The colocated meshes as one format-v2 stage of layers ``first_layer..last_layer``.

        The stage's layers must form two segments in the problem it is
        evaluated in (the vision layers, then the language layers); rank r of
        both meshes sits on ``device_ids[r]``, as in this class.
        """
        devices = self._colocated_devices()
        vision, language = (Layout(c.dp, c.tp, v) for c, v in zip(self.configs, variants))
        return Stage.from_configs(first_layer, last_layer, self.num_gpus, (vision, language), devices)

    def reshard_ms(self, batch: int, seq: int, width: int, cluster: Cluster, dtype_bytes: int = 2) -> float:
        """r for a [batch, seq, width] tensor on ``cluster``: what the v2 stage pays in forward and in backward."""
        devices = self._colocated_devices()
        vision, language = self.configs
        return segment_reshard_ms(batch * seq * width * dtype_bytes, vision, language, devices, cluster)

    def forward_reshard(self, v_tensors: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Vision ranks' [B_v, S, D_v/tp_v] blocks -> language ranks' [B/dp_l, S, D_v/tp_l] blocks."""
        arrays = [np.asarray(t) for t in v_tensors]
        if len(arrays) != self.vision.size or any(a.ndim != 3 for a in arrays):
            raise ValueError(f"expected {self.vision.size} arrays of shape [B, S, D], one per vision rank")
        batch = sum(arrays[r].shape[0] for r in range(0, self.vision.size, self.tp_v))
        width = sum(arrays[r].shape[2] for r in range(self.tp_v))
        plan = self.plan(batch, arrays[0].shape[1], width, arrays[0].dtype.itemsize)
        return execute_forward(plan, arrays)

    def backward_reshard(self, l_grads: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The transpose: language ranks' gradient blocks back to the vision ranks."""
        arrays = [np.asarray(t) for t in l_grads]
        if len(arrays) != self.language.size or any(a.ndim != 3 for a in arrays):
            raise ValueError(f"expected {self.language.size} arrays of shape [B, S, D], one per language rank")
        batch = sum(arrays[r].shape[0] for r in range(0, self.language.size, self.tp_l))
        width = sum(arrays[r].shape[2] for r in range(self.tp_l))
        plan = self.plan(batch, arrays[0].shape[1], width, arrays[0].dtype.itemsize)
        return execute_backward(plan, arrays)
