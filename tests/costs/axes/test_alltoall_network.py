"""The network part of an expert-parallel all-to-all runs at DeepEP's measured fraction of the NIC's rate.

Closed form: a rank of an EP 16 group over two 8-GPU nodes sends ``(r - g) / r = 8 / 16`` of its
``k T (h beta + probs)`` buffer over its NIC at ``alltoall_network_efficiency x inter_node_GBps``; the NVLink
part (7 / 16 of it at 0.8 x 450 GB/s) is the faster, so the network part sets the transfer.
"""
from __future__ import annotations

import pytest

from partitioner.costs import CostOptions, load_cluster
from partitioner.costs.axes.experts import dispatch_buffer, dispatch_times
from partitioner.costs.axes.groups import GroupSpan, alltoall_ms
from partitioner.problem import ProblemError

H200 = load_cluster("dgx-h200")
TOKENS, TOP_K, HIDDEN = 8192, 8, 4096  # GLM-4.5V's LLM, one 8192-token sample per rank


def _glm_ep16(opts: CostOptions):
    copies = TOKENS * TOP_K
    return dispatch_times(copies, HIDDEN, 16, 1, GroupSpan(16, 8), GroupSpan(1, 1), intra_GBps=H200.intra_node_GBps,
                          inter_GBps=H200.inter_node_GBps, opts=opts)


def test_default_network_efficiency_is_deepeps_measured_fraction():
    assert CostOptions().axes.alltoall_network_efficiency == pytest.approx(0.89)


def test_two_node_ep16_dispatch_matches_the_closed_form():
    opts = CostOptions()
    eff = opts.axes.alltoall_network_efficiency
    copies = TOKENS * TOP_K
    network = copies * (HIDDEN * 2 + 4) * 8 / 16  # bytes over the NIC, probabilities with the dispatch
    expected = opts.collective_latency_us * 1e-3 + network / (eff * H200.inter_node_GBps * 1e6)
    times = _glm_ep16(opts)
    assert times.dispatch == pytest.approx(expected)
    assert times.dispatch == pytest.approx(0.02 + 268.5e6 / (0.89 * 50e9) * 1e3, rel=1e-3)  # ~6.05 ms
    tokens_only = opts.collective_latency_us * 1e-3 + copies * HIDDEN * 2 * 8 / 16 / (eff * 50e6)
    assert times.combine == pytest.approx(tokens_only)


def test_line_rate_recovers_the_old_transfer_and_nvlink_is_untouched():
    line = CostOptions.from_mapping({"alltoall_network_efficiency": 1.0})
    slow, fast = _glm_ep16(CostOptions()), _glm_ep16(line)
    latency = CostOptions().collective_latency_us * 1e-3
    assert (slow.dispatch - latency) == pytest.approx((fast.dispatch - latency) / 0.89)
    # inside one node no byte crosses a NIC: the efficiency changes nothing
    buf = dispatch_buffer(TOKENS * TOP_K, HIDDEN)
    kw = dict(latency_us=20.0, nvlink_efficiency=0.8)
    assert alltoall_ms(buf, GroupSpan(8, 8), 450.0, 50.0, network_efficiency=0.5, **kw) == \
        alltoall_ms(buf, GroupSpan(8, 8), 450.0, 50.0, **kw)


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, "fast", True])
def test_bad_network_efficiency_is_refused_naming_the_option(bad):
    with pytest.raises(ProblemError, match="alltoall_network_efficiency"):
        CostOptions.from_mapping({"alltoall_network_efficiency": bad})
