"""Expert weights + optimizer bytes against a real megatron-core MoE layer built on a fake process group.

megatron-core's wheel does not ship Megatron-LM's ``megatron.training``
estimator (``compute_weight_and_optimizer_memory``), so the oracle here is
megatron-core itself: its ``initialize_model_parallel`` (order
tp-cp-ep-dp-pp) gives the expert-data-parallel size, and a MoE
``TransformerLayer`` built from its local layer spec on rank 0 holds the
expert parameters that rank keeps (``allreduce=False``: synced over the
expert-data-parallel group, not over dp). Megatron's per-parameter bytes
(18, or 6 + 12/d with the distributed optimizer, d the group the optimizer
shards over) applied to those counts must equal
:func:`~partitioner.costs.axes.experts.expert_weight_bytes`.
"""
from __future__ import annotations

import pytest

from partitioner.costs.axes.experts import expert_data_parallel, expert_weight_bytes

pytest.importorskip("megatron.core", reason="megatron-core is not installed (the frameworks extra)")
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

pytestmark = pytest.mark.slow  # builds megatron-core layers: ~10 s on 2 cores

HIDDEN, MOE_FFN, EXPERTS, TOP_K = 64, 32, 8, 2


@pytest.fixture
def megatron_world():
    """A fake process group of a given world size with Megatron's groups on it (no collective runs)."""
    from megatron.core import parallel_state
    from torch.testing._internal.distributed.fake_pg import FakeStore

    def init(world: int, tp: int, cp: int, ep: int, etp: int) -> None:
        if dist.is_initialized():
            parallel_state.destroy_model_parallel()
            dist.destroy_process_group()
        dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
        parallel_state.initialize_model_parallel(
            tensor_model_parallel_size=tp, context_parallel_size=cp, expert_model_parallel_size=ep,
            expert_tensor_parallel_size=etp, create_gloo_process_groups=False, order="tp-cp-ep-dp-pp")

    yield init
    parallel_state.destroy_model_parallel()
    if dist.is_initialized():
        dist.destroy_process_group()


def _megatron_expert_params(tp: int, ep: int, etp: int) -> tuple[int, int]:
    """(expert parameters on rank 0, routed experts' parameters in the whole layer) of megatron-core's MoE layer."""
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.spec_utils import build_module

    cfg = TransformerConfig(
        num_layers=1, hidden_size=HIDDEN, num_attention_heads=4, ffn_hidden_size=4 * HIDDEN, num_moe_experts=EXPERTS,
        moe_ffn_hidden_size=MOE_FFN, moe_router_topk=TOP_K, gated_linear_unit=True,
        activation_func=torch.nn.functional.silu, add_bias_linear=False, use_cpu_initialization=True,
        perform_initialization=False, moe_grouped_gemm=False, moe_token_dispatcher_type="allgather",
        tensor_model_parallel_size=tp, expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
        sequence_parallel=False)  # torch LayerNorm (no Apex/TE on CPU) refuses SP; SP does not change weights
    layer = build_module(get_gpt_layer_local_spec(num_experts=EXPERTS, moe_grouped_gemm=False), config=cfg,
                         layer_number=1)
    local = sum(p.numel() for p in layer.parameters() if not getattr(p, "allreduce", True))
    routed = EXPERTS * 3 * HIDDEN * MOE_FFN  # gated: fc1 holds gate and up (2 f x h), fc2 is h x f
    return local, routed


@pytest.mark.parametrize("world,tp,cp,ep,etp", [
    (8, 1, 1, 4, 1), (8, 1, 1, 8, 1), (8, 2, 1, 4, 1), (16, 2, 2, 4, 1), (8, 2, 1, 2, 2), (16, 1, 2, 8, 2),
])
@pytest.mark.parametrize("distributed_optimizer", [False, True])
def test_expert_weights_and_optimizer_match_megatron_core(megatron_world, world, tp, cp, ep, etp,
                                                          distributed_optimizer):
    from megatron.core import parallel_state

    megatron_world(world, tp, cp, ep, etp)
    dp = world // (tp * cp)
    edp = parallel_state.get_expert_data_parallel_world_size()
    assert expert_data_parallel(dp, tp, cp, ep, etp) == edp
    local, routed = _megatron_expert_params(tp, ep, etp)
    assert local * ep * etp == routed  # megatron-core keeps E/ep experts, each split over etp
    theirs = local * ((6 + 12 / edp) if distributed_optimizer else 18)  # Megatron's bytes per parameter
    ours = expert_weight_bytes(routed, ep, etp, edp, bytes_per_param=18, optimizer_bytes_per_param=12,
                               distributed_optimizer=distributed_optimizer)
    assert ours == pytest.approx(theirs, rel=1e-12)
