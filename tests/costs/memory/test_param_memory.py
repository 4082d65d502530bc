"""Bytes per parameter as each framework counts them (partitioner.costs.memory.param_memory).

One closed form per named count, written from the buffers the framework
allocates; DeepSpeed's own estimators as the oracle for ZeRO-2 and ZeRO-3
(where deepspeed is installed); a real FSDP2 ``fully_shard`` with
torchtitan's mixed precision (one CPU rank) and a real ``torch.autocast``
for the counts they describe; the options a count selects and the weight
bytes the builder then charges.
"""
from __future__ import annotations

import contextlib
import io
import re

import pytest

from partitioner.costs import build_problem
from partitioner.costs.memory.param_memory import PARAM_MEMORY, param_memory
from partitioner.costs.options import CostOptions
from partitioner.problem import ProblemError

DPS = (1, 2, 3, 8, 64)

# name -> bytes on one GPU for one parameter with dp = d (L: the largest layer's parameters per parameter)
CLOSED_FORMS = {
    "megatron": lambda d: 18.0,  # 2 bf16 weight + 4 fp32 main_grad + 12 fp32 master, m, v
    "megatron-distopt": lambda d: 6.0 + 12.0 / d,
    "fsdp2": lambda d: 16.0 / d,  # fp32 sharded param + fp32 grad + m + v
    "fsdp2-keep-gathered": lambda d: 2.0 + 16.0 / d,
    "torchtitan-ddp": lambda d: 18.0,  # fp32 param, grad, m, v + the bf16 autocast copy
    "deepspeed-zero0": lambda d: 16.0,  # ZeRO paper's 2 + 2 + 12
    "deepspeed-bf16": lambda d: 4.0 + 12.0 / d,
    "deepspeed-bf16-fp32acc": lambda d: 6.0 + 12.0 / d,
    "deepspeed-zero1": lambda d: 4.0 + 16.0 / d,
    "deepspeed-zero2": lambda d: 2.0 + 18.0 / d,
    "deepspeed-zero3": lambda d: 18.0 / d,  # + 4 per parameter of the largest layer
}


def test_every_count_has_a_closed_form():
    assert set(CLOSED_FORMS) == set(PARAM_MEMORY)


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
@pytest.mark.parametrize("d", DPS)
def test_closed_form(name, d):
    assert param_memory(name).per_gpu(d) == pytest.approx(CLOSED_FORMS[name](d), rel=1e-12)


def test_zero3_adds_the_largest_layer_gathered():
    assert param_memory("deepspeed-zero3").per_gpu(8, largest_layer_params=1e6, params=1e9) == pytest.approx(
        18e9 / 8 + 4e6)


@pytest.mark.parametrize("nodes, gpus", [(1, 1), (1, 8), (4, 8), (16, 8)])
def test_deepspeed_zero2_estimator_is_the_oracle(nodes, gpus):
    stage12 = pytest.importorskip("deepspeed.runtime.zero.stage_1_and_2")
    params = 7_000_000_123
    _, gpu = stage12.estimate_zero2_model_states_mem_needs(params, gpus, nodes, cpu_offload=False)
    ours = param_memory("deepspeed-zero2").per_gpu(nodes * gpus, params=params)
    assert abs(gpu - ours) <= 1.0, (gpu, ours)


@pytest.mark.parametrize("nodes, gpus", [(1, 1), (1, 8), (4, 8)])
def test_deepspeed_zero3_estimator_is_the_oracle(nodes, gpus):
    stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    params, largest = 13_000_000_007, 262_144_000
    _, gpu, _ = stage3.estimate_zero3_model_states_mem_needs(params, largest, gpus, nodes, cpu_offload=False,
                                                             cpu_offload_params=False)
    ours = param_memory("deepspeed-zero3").per_gpu(nodes * gpus, largest_layer_params=largest, params=params)
    assert abs(gpu - ours) <= 1.0, (gpu, ours)


def test_deepspeed_zero3_all_live_estimator_on_a_real_model():
    """``estimate_zero3_model_states_mem_needs_all_live`` prints its per-GPU GB for a live module; ours matches."""
    torch = pytest.importorskip("torch")
    stage3 = pytest.importorskip("deepspeed.runtime.zero.stage3")
    def linear(i, o):  # real storages (the estimator deduplicates by data_ptr), bf16 and uninitialized
        return torch.nn.utils.skip_init(torch.nn.Linear, i, o, dtype=torch.bfloat16)

    model = torch.nn.Sequential(linear(4096, 16384), torch.nn.GELU(), linear(16384, 4096))
    total, largest = stage3.model_to_params(model)
    assert total == sum(p.numel() for p in model.parameters())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        stage3.estimate_zero3_model_states_mem_needs_all_live(model, num_gpus_per_node=2, num_nodes=1)
    row = next(line for line in out.getvalue().splitlines()
               if "offload_param=none" in line and "offload_optimizer=none" in line)
    gb = float(re.findall(r"([\d.]+)GB", row)[1])  # per CPU | per GPU
    ours = param_memory("deepspeed-zero3").per_gpu(2, largest_layer_params=largest, params=total) / 2**30
    assert gb == pytest.approx(ours, abs=0.006), (row, ours)


@pytest.mark.parametrize("d", DPS)
def test_zero1_keeps_the_whole_16bit_gradient_zero2_shards(d):
    """Stage 1 differs from stage 2 by the 16-bit gradient left unpartitioned (``partition_gradients`` false)."""
    diff = param_memory("deepspeed-zero1").per_gpu(d) - param_memory("deepspeed-zero2").per_gpu(d)
    assert diff == pytest.approx(2.0 * (1 - 1 / d))


def test_megatron_defaults_are_the_cost_model_defaults():
    """The defaults are Megatron-LM's distributed optimizer (the ZeRO-1 knob); without it nothing is sharded."""
    opts = CostOptions()
    for key, value in param_memory("megatron-distopt").option_overrides().items():
        assert getattr(opts, key) == value, key
    assert opts.memory_count == "megatron-distopt"
    assert param_memory("megatron").option_overrides()["bytes_per_param"] == opts.bytes_per_param
    assert param_memory("megatron").option_overrides()["optimizer_bytes_per_param"] == 0


def test_fsdp2_mixed_precision_keeps_16_bytes_per_parameter():
    """One CPU rank, torchtitan's policy (bf16 params, fp32 reduce) on an fp32 model: shards, grads, Adam = 16 B."""
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    fsdp = pytest.importorskip("torch.distributed.fsdp")
    if not dist.is_available():
        pytest.skip("torch.distributed unavailable")
    import os
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (1,))
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 64))
        policy = fsdp.MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for layer in model:
            fsdp.fully_shard(layer, mesh=mesh, mp_policy=policy)
        fsdp.fully_shard(model, mesh=mesh, mp_policy=policy)
        opt = torch.optim.Adam(model.parameters())
        model(torch.randn(8, 64)).float().sum().backward()
        opt.step()
        n = sum(p.numel() for p in model.parameters())

        def local_bytes(t):
            t = t.to_local() if hasattr(t, "to_local") else t
            return t.numel() * t.element_size()

        kept = sum(local_bytes(p) for p in model.parameters())
        kept += sum(local_bytes(p.grad) for p in model.parameters())
        kept += sum(local_bytes(v) for state in opt.state.values() for k, v in state.items() if k in ("exp_avg", "exp_avg_sq"))
        assert kept == param_memory("fsdp2").per_gpu(1, params=n)
    finally:
        dist.destroy_process_group()


def test_autocast_keeps_a_bf16_copy_of_each_weight_for_backward():
    """torchtitan's DDP path: under ``torch.autocast`` a linear saves the bf16 cast of its fp32 weight (2 B/param)."""
    torch = pytest.importorskip("torch")
    layer = torch.nn.Linear(256, 512)
    x = torch.randn(4, 256, requires_grad=True)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            layer(x)
    weight = layer.weight
    copies = [t for t in saved if t.dtype == torch.bfloat16 and sorted(t.shape) == sorted(weight.shape)]
    assert len(copies) == 1  # saved for the input gradient (as its transpose)
    storage = copies[0].untyped_storage()
    assert storage.data_ptr() != weight.untyped_storage().data_ptr()
    assert storage.nbytes() == 2 * weight.numel()


@pytest.mark.parametrize("name", sorted(PARAM_MEMORY))
def test_memory_count_option_sets_the_fields(name):
    count = param_memory(name)
    opts = CostOptions.from_mapping({"memory_count": name})
    for key, value in count.option_overrides().items():
        assert getattr(opts, key) == value
    # with the count's knob the builder's per-parameter rule is the count's
    for d in DPS:
        if count.knob == 0:
            per = opts.bytes_per_param
        elif count.knob == 1:
            per = opts.bytes_per_param - opts.optimizer_bytes_per_param * (1 - 1 / d)
        else:
            per = opts.bytes_per_param / d
        assert per == pytest.approx(count.per_gpu(d) - count.gathered_layer * 0)


def test_explicit_fields_win_over_the_count():
    opts = CostOptions.from_mapping({"memory_count": "deepspeed-zero2", "grad_bytes_per_param": 4.0})
    assert opts.grad_bytes_per_param == 4.0 and opts.bytes_per_param == 20.0


def test_unknown_count_is_a_problem_error_naming_the_field():
    with pytest.raises(ProblemError) as err:
        CostOptions.from_mapping({"memory_count": "colossal"})
    assert "options.memory_count" in str(err.value)
    with pytest.raises(ProblemError):
        CostOptions.from_mapping({"memory_count": ["fsdp2"]})


@pytest.mark.parametrize("name", ["deepspeed-zero2", "deepspeed-zero1", "fsdp2-keep-gathered", "deepspeed-bf16"])
def test_builder_charges_the_count(name):
    """With ZeRO-1 (the counts' knob) an LLM block's weight bytes are params / tp x the count at its dp."""
    assert param_memory(name).knob == 1
    p = build_problem("llava-1.5-7b", "dgx-h100", nodes=1, global_batch=64, microbatches=8,
                      options={"zero1": True, "memory_count": name})
    i = [layer.name for layer in p.layers].index("llm.5")
    params = next(h["params"] for h in p.meta["layers"] if h["name"] == "llm.5")
    for lay, cost in p.layers[i].costs.items():
        assert cost.weight_bytes == pytest.approx(CLOSED_FORMS[name](lay.dp) * params / lay.tp, abs=1)
