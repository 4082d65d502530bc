"""Run exported DeepSpeed snippets on W CPU ranks (gloo, ``DS_ACCELERATOR=cpu``); print what each rank built.

``python tests/frameworks/ds_ranks.py JOBS.json W PORT`` where JOBS.json is a
list of ``{"id", "snippet", "layers"}``. Every rank executes each snippet
verbatim, with ``layers`` = one small ``nn.Linear`` per planned layer, so
DeepSpeed's own ``PipelineModule.__init__`` builds the topology's process
groups and calls the snippet's ``_partition_layers``. The topology keeps the
exported pipeline size; its model- and data-parallel sizes are folded into
data parallelism over the W ranks (W a multiple of every pipeline size), so
a 64-GPU plan runs on a handful of processes: the partition depends only
on the pipeline coordinate. The requested sizes are reported. Prints one
JSON line per rank: ``[{"id", "rank", "stage", "start", "stop", "built", "parts", "asked"}]``.

The ranks are forked before anything imports torch (each rank imports
DeepSpeed itself). DeepSpeed's CPU backend would JIT-compile its optional shared-memory collective op (a C++
build, minutes on 2 cores); partitioning uses no collective data path, so
the op is not built.
"""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import queue as queues
import sys
import time
from datetime import timedelta

os.environ["DS_ACCELERATOR"] = "cpu"
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # gloo on localhost only


def _rank(rank: int, world: int, port: int, jobs: list[dict], queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank), LOCAL_SIZE=str(world))
    # imported in the rank, after the fork: a process forked from one that already runs torch's and
    # DeepSpeed's threads can block for ever on a lock one of them held
    import deepspeed
    import deepspeed.comm.torch  # noqa: F401  (``import ... as`` would bind deepspeed.comm's attribute ``torch``: torch)
    import deepspeed.runtime.pipe.topology as topology
    from torch import nn

    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, timeout=timedelta(minutes=10))
    real = topology.PipeModelDataParallelTopology
    out = []
    for job in jobs:
        asked: dict[str, int] = {}

        def planned_topology(num_pp: int, num_mp: int, num_dp: int):
            asked.update(num_pp=num_pp, num_mp=num_mp, num_dp=num_dp)
            return real(num_pp=num_pp, num_mp=1, num_dp=world // num_pp)

        topology.PipeModelDataParallelTopology = planned_topology
        namespace = {"layers": [nn.Linear(1, 1) for _ in range(job["layers"])]}
        exec(compile(job["snippet"], f"<{job['id']}>", "exec"), namespace)
        model = namespace["model"]
        out.append({"id": job["id"], "rank": rank, "stage": model.stage_id, "start": model._local_start,
                    "stop": model._local_stop, "built": len(model.forward_funcs), "parts": list(model.parts), "asked": asked})
        topology.PipeModelDataParallelTopology = real
    deepspeed.comm.barrier()  # no rank leaves while another still builds groups with it
    queue.put(out)


def main() -> None:
    jobs = json.loads(open(sys.argv[1]).read())
    world, port = int(sys.argv[2]), int(sys.argv[3])
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, world, port, jobs, queue)) for r in range(world)]
    for p in procs:
        p.start()
    results: list[list[dict]] = []
    deadline = time.monotonic() + 600
    while len(results) < world:  # a rank that dies ends the run at once, not after a time-out
        try:
            results.append(queue.get(timeout=2))
        except queues.Empty:
            if any(p.exitcode not in (None, 0) for p in procs) or time.monotonic() > deadline:
                for p in procs:
                    p.kill()
                sys.exit(f"ranks ended {[p.exitcode for p in procs]} with {len(results)} of {world} results")
    for p in procs:
        p.join(timeout=60)
    codes = [p.exitcode for p in procs]
    print(json.dumps({"exitcodes": codes, "ranks": sorted((r for res in results for r in res), key=lambda r: (r["id"], r["rank"]))}))


if __name__ == "__main__":
    main()
