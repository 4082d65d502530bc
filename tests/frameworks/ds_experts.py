"""Build DeepSpeed's MoE layer from exported settings on a fake process group; print each rank-0 expert count.

``python tests/frameworks/ds_experts.py JOBS.json`` where JOBS.json is a list
of ``{"id", "world", "pp", "tp", "dp", "hidden", "moe_ffn", "moe"}`` (``moe``:
the export's ``settings["moe"]``). For each job, on rank 0 of a fake world
(torch's ``fake`` backend; no collective runs) with a model-parallel unit of
the plan's tp, dp and pp, DeepSpeed's ``MoE(..., ep_size,
enable_expert_tensor_parallelism)`` builds its expert groups
(``set_deepspeed_parallelism``), which set DeepSpeed's expert tensor-parallel
size (the group its MoE layer gathers tokens over around the experts). The
expert module is a gated MLP ``hidden -> moe_ffn / that size``, as
Megatron-DeepSpeed builds a tensor-parallel expert; DeepSpeed keeps
``num_experts / ep_size`` copies of it. Prints one JSON line:
``[{"id", "local_experts", "expert_tp", "expert_params"}]``. Every job has one world size.

A separate process: DeepSpeed's groups and communication backend are process globals.
"""
from __future__ import annotations

import json
import os
import sys

os.environ["DS_ACCELERATOR"] = "cpu"


class _Mpu:
    """The model-parallel unit DeepSpeed's expert groups read: the plan's tp, dp and pp sizes (rank 0)."""

    def __init__(self, tp: int, dp: int, pp: int):
        self.tp, self.dp, self.pp = tp, dp, pp

    def get_tensor_model_parallel_world_size(self) -> int:
        return self.tp

    def get_tensor_model_parallel_rank(self) -> int:
        return 0

    def get_model_parallel_world_size(self) -> int:
        return self.tp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_data_parallel_rank(self) -> int:
        return 0

    def get_pipeline_model_parallel_world_size(self) -> int:
        return self.pp


def _expert(hidden: int, width: int):
    """A gated MLP expert (gate, up, down; no biases)."""
    from torch import nn

    class GatedMLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate_up = nn.Linear(hidden, 2 * width, bias=False)
            self.down = nn.Linear(width, hidden, bias=False)

    return GatedMLP()


def _run(job: dict) -> dict:
    from deepspeed.moe.layer import MoE
    from deepspeed.utils import groups

    groups._EXPERT_PARALLEL_GROUP.clear()
    groups._EXPERT_DATA_PARALLEL_GROUP.clear()
    groups.expert_tensor_parallel_world_size = 1  # DeepSpeed's initial value: each job starts fresh
    groups.mpu = _Mpu(job["tp"], job["dp"], job["pp"])
    moe = job["moe"]
    kwargs = dict(num_experts=moe["num_experts"], ep_size=moe["ep_size"], k=moe["k"],
                  enable_expert_tensor_parallelism=moe["enable_expert_tensor_parallelism"])
    probe = MoE(job["hidden"], _expert(job["hidden"], 1), **kwargs)
    probe.set_deepspeed_parallelism()  # DeepSpeed's expert groups, and its expert tensor-parallel size
    expert_tp = groups._get_expert_model_parallel_world_size()
    layer = MoE(job["hidden"], _expert(job["hidden"], job["moe_ffn"] // expert_tp), **kwargs)
    params = sum(p.numel() for p in layer.deepspeed_moe.experts.parameters())
    return {"id": job["id"], "local_experts": layer.num_local_experts, "expert_tp": expert_tp, "expert_params": params}


def main() -> None:
    import deepspeed.comm as ds_comm
    import deepspeed.comm.torch  # noqa: F401  (``import ... as`` would bind deepspeed.comm's attribute ``torch``: torch)
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    jobs = json.loads(open(sys.argv[1]).read())
    assert len({job["world"] for job in jobs}) == 1, "one world size per run"
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None  # no collective data path runs
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=jobs[0]["world"])
    ds_comm.init_distributed(dist_backend="fake", auto_mpi_discovery=False)
    print(json.dumps([_run(job) for job in jobs]))


if __name__ == "__main__":
    main()
