"""The accepted ranges and resource limits, in one place.

Every number a problem, plan, sweep or preset file holds is carried by
floating-point and 64-bit integer arithmetic in the solvers (prefix sums,
scaled integer models, numpy tables). These bounds keep that arithmetic
exact enough to certify an optimum, keep every document small enough to
load in bounded memory and time, and are what the loaders check: a value
outside them is an input error (:class:`partitioner.problem.ProblemError`,
naming the file and the field), never a wrong answer, a hang or a crash.
docs/limits.md states them for users.

More (the detail of this module): ``docs/internals/core.md``, section ``partitioner.core.limits``.
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
    "MAX_LEVELS",
    "MAX_OVERSUBSCRIPTION",
    "MAX_GLOBAL_BATCH",
    "MAX_MODULES",
    "MAX_MODULE_LAYERS",
    "MAX_WIDTH",
    "MAX_VOCAB",
    "MAX_TOKENS",
    "MAX_IMAGE_SIZE",
    "MAX_IMAGES",
    "MAX_CHANNELS",
    "MAX_PASSES",
    "MAX_PROJECTOR_DEPTH",
    "MAX_BLOCK_NORMS",
    "MIN_FPS",
    "MAX_FPS",
    "MAX_PARAMS",
    "MIN_TFLOPS",
    "MAX_TFLOPS",
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
MAX_NODES = 131_072  # 2^17: a cluster of one-GPU nodes as large as the largest accepted cluster
MAX_GPUS_PER_NODE = 1024
# References of the comments below (the module docstring's detail is in docs/internals/core.md):
# .. [5] A. Grattafiori et al., "The Llama 3 Herd of Models", arXiv:2407.21783
#    (2024), Section 3.3.1 (pre-training on up to 16K H100 GPUs).
# .. [6] X. Zhai et al., "Sigmoid Loss for Language Image Pre-Training",
#    ICCV 2023, arXiv:2303.15343, Section 4 (batch sizes up to one million).

MAX_DEVICES = 131_072  # nodes * gpus_per_node: 2^17 GPUs, 8x the 16,384 H100 of Llama 3 405B's pre-training [5]_
MAX_LAYERS = 100_000
MAX_MICROBATCHES = 100_000
MAX_VIRTUAL_STAGES = 1024
MAX_EDGES = 1_000_000  # topology edges
MAX_LEVELS = 8  # cluster.levels: NVLink domain, leaf/rail, spine, pod, ... with room to spare
MAX_OVERSUBSCRIPTION = 1024.0  # a level's oversubscription (1 = non-blocking)
MAX_GLOBAL_BATCH = 2**24  # samples per iteration of `plan` (16 777 216: 16x the largest batch trained, 2^20 [6]_)

# -- model presets, config.json files and spec objects (partitioner.presets.checks)
MAX_MODULES = 16  # modules in one model (the largest preset has 5)
MAX_MODULE_LAYERS = 1024  # transformer blocks in one module (DeepNet trained 1000)
MAX_WIDTH = 2**17  # hidden, ffn, head_dim, heads x head_dim, projector and action widths (131 072)
MAX_VOCAB = 2**21  # vocabulary entries (2 097 152; the largest tokenizers hold about 256 000)
MAX_TOKENS = 2**20  # tokens per sample in any module: text, image patches x images, projector, action
MAX_IMAGE_SIZE = 2**14  # image side and patch side in pixels (16 384)
MAX_IMAGES = 1024  # images (or clips) per sample, frames per clip, frames per temporal patch
MAX_CHANNELS = 1024  # input channels of a patch embedding
MAX_PASSES = 1024  # forward passes of an action head per sample (flow-matching or diffusion steps)
MAX_PROJECTOR_DEPTH = 16  # linear layers of a projector
MAX_BLOCK_NORMS = 8  # norms in one block (2; Gemma 2/3 and GLM-4 "sandwich" blocks have 4)
MIN_FPS = 1e-3  # a workload's frame rate (it only sets the clip length shown): one frame per 1000 s (time-lapse) ...
MAX_FPS = 1e6  # ... to a million frames per second (high-speed cameras); training video is sampled at 1-60
MAX_PARAMS = 2**44  # parameters of one module (1.76e13): at 16 B each, 2^48 bytes < MAX_TOTAL_BYTES
MIN_TFLOPS = 1e-3  # a cluster's peak_tflops per GPU: 1 GFLOP/s ...
MAX_TFLOPS = 1e6  # ... to 1 EFLOP/s (an H100 peaks at about 1e3)

# -- work the 1F1B replay may do (2 * microbatches * stages operations)
MAX_REPLAY_OPS = 1_000_000  # simulate(): larger replays are refused
SOLVE_REPLAY_OPS = 200_000  # solve(validate=True): larger replays are skipped, and the result says so
