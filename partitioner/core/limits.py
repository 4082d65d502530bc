"""The accepted ranges and resource limits, in one place.

Every number a problem, plan, sweep or preset file holds is carried by
floating-point and 64-bit integer arithmetic in the solvers (prefix sums,
scaled integer models, numpy tables). These bounds keep that arithmetic
exact enough to certify an optimum, keep every document small enough to
load in bounded memory and time, and are what the loaders check: a value
outside them is an input error (:class:`partitioner.problem.ProblemError`,
naming the file and the field), never a wrong answer, a hang or a crash.
docs/limits.md states them for users.

Why these numbers
-----------------
* A stage's compute time is a sum of at most :data:`MAX_LAYERS` entries of at
  most :data:`MAX_TIME_MS` (forward plus backward), so every total stays
  below 2e14 ms, where doubles still resolve 1/32 ms and the solvers'
  compensated range sums (:mod:`partitioner.solvers.tables`) are exact to
  far below the objective's relative tolerance.
* Byte counts are at most :data:`MAX_BYTES` (1 PiB) per entry and, per
  config, the sum over all layers of ``weight_bytes`` (and of ``act_bytes``)
  is at most :data:`MAX_TOTAL_BYTES` (2^53): int64 prefix sums and their
  float copies are then exact.
* Bandwidths lie in [:data:`MIN_GBPS`, :data:`MAX_GBPS`], so a transfer of
  :data:`MAX_BYTES` takes a finite, representable time.
* Cluster and training sizes (:data:`MAX_NODES`, :data:`MAX_DEVICES`,
  :data:`MAX_MICROBATCHES`) bound the tables the solvers and the simulator
  build from them.
* Document shape (:data:`MAX_FILE_BYTES`, :data:`MAX_DEPTH`,
  :data:`MAX_VALUES`, :data:`MAX_STRING`, :data:`MAX_INT`) bounds what any
  reader accepts before looking at the fields, YAML aliases included.
"""
from __future__ import annotations

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_DEPTH",
    "MAX_VALUES",
    "MAX_STRING",
    "MAX_INT",
    "MAX_TIME_MS",
    "MAX_BYTES",
    "MAX_TOTAL_BYTES",
    "MIN_GBPS",
    "MAX_GBPS",
    "MAX_NODES",
    "MAX_GPUS_PER_NODE",
    "MAX_DEVICES",
    "MAX_LAYERS",
    "MAX_MICROBATCHES",
    "MAX_VIRTUAL_STAGES",
    "MAX_EDGES",
    "MAX_REPLAY_OPS",
    "SOLVE_REPLAY_OPS",
]

# -- document shape (every reader: problems, plans, results, sweeps, presets, profiles)
MAX_FILE_BYTES = 256 * 2**20  # a file larger than 256 MiB is refused before it is read
MAX_DEPTH = 64  # nesting of objects and lists
MAX_VALUES = 2**24  # values in a document, counted after expanding YAML aliases
MAX_STRING = 4096  # characters in any string (names, keys, meta)
MAX_INT = 2**63 - 1  # |integer| anywhere in a document (field bounds below are tighter)

# -- problem fields
MAX_TIME_MS = 1e9  # per cost entry: fwd_ms, bwd_ms, bwd_input_ms, bwd_weight_ms (about 11.6 days)
MAX_BYTES = 2**50  # per entry: gpu_memory_bytes, weight_bytes, act_bytes, out_bytes (1 PiB)
MAX_TOTAL_BYTES = 2**53  # per config: the sum over layers of weight_bytes, and of act_bytes
MIN_GBPS = 1e-6  # bandwidths (intra_node_GBps, inter_node_GBps, topology edges): 1 kB/s ...
MAX_GBPS = 1e6  # ... to 1 PB/s
MAX_NODES = 1024
MAX_GPUS_PER_NODE = 1024
MAX_DEVICES = 8192  # nodes * gpus_per_node
MAX_LAYERS = 100_000
MAX_MICROBATCHES = 100_000
MAX_VIRTUAL_STAGES = 1024
MAX_EDGES = 1_000_000  # topology edges

# -- work the 1F1B replay may do (2 * microbatches * stages operations)
MAX_REPLAY_OPS = 1_000_000  # simulate(): larger replays are refused
SOLVE_REPLAY_OPS = 200_000  # solve(validate=True): larger replays are skipped, and the result says so
