"""Build torchtitan's own language model from exported settings and print what one rank of each stage holds.

``python tests/frameworks/titan_ranks.py JOBS.json`` where JOBS.json is a
list of ``{"id", "family", "llm", "parallelism", "parts"}``: ``family`` one
of torchtitan 0.3's model families (``llama3``, ``qwen3`` -- its MoE
layers --, ``deepseek_v3``), ``llm`` the scaled preset's decoder fields
(``hidden``, ``heads``, ``kv_heads``, ``head_dim``, ``ffn``, ``layers``,
``vocab``, MoE and MLA widths), ``parallelism`` the export's
``parallelism`` section and ``parts`` its ``module_fqns_per_model_part``.
For each job, on rank 0 of a fake world of one stage's ranks (torch's
``fake`` backend: no collective runs) with torchtitan's ``ParallelDims``
of the export's replicate, shard, tp and ep degrees, the model config of
that family gets the family's sharding config (``set_*_sharding_config``,
as ``update_from_config`` sets it from the parallelism section), is built
on the meta device and parallelized (``Module.parallelize``: torchtitan's
own tensor and expert sharding). Prints one JSON line: per job, per stage
of ``parts``, the parameters rank 0 holds of the modules the stage names
(``tok_embeddings``, ``layers.<k>``, ``norm``, ``lm_head``; the vision
encoder is not built) and of those the routed experts'. Family ``vit``:
one block of torchtitan's common vision encoder (``VisionTransformerBlock``)
of the tower's widths, its parameters on rank 0.

A separate process: the process group and torchtitan's meshes are process globals.
"""
from __future__ import annotations

import json
import sys


def _config(family: str, m: dict):
    """torchtitan's model config of ``family`` with the scaled preset's widths (its own layer builders)."""
    from torchtitan.models.common import ComplexRoPE, CosSinRoPE, Embedding, Linear
    from torchtitan.models.common.nn_modules import RMSNorm

    dim, vocab, heads = m["hidden"], m["vocab"], m["heads"]
    common = dict(vocab_size=vocab, dim=dim, norm=RMSNorm.Config(normalized_shape=dim),
                  tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=dim),
                  lm_head=Linear.Config(in_features=dim, out_features=vocab))
    if family == "llama3":
        from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers

        head = dim // heads
        return Llama3Model.Config(**common, layers=_build_llama3_layers(
            n_layers=m["layers"], dim=dim, n_heads=heads, n_kv_heads=m["kv_heads"], hidden_dim=m["ffn"],
            rope=ComplexRoPE.Config(dim=head, max_seq_len=4096, theta=10000.0), attn_backend="flex"))
    if family == "qwen3":
        from torchtitan.models.qwen3 import Qwen3Model, _build_qwen3_moe_layers

        return Qwen3Model.Config(**common, layers=_build_qwen3_moe_layers(
            n_layers=m["layers"], dim=dim, n_heads=heads, n_kv_heads=m["kv_heads"], head_dim=m["head_dim"],
            moe_hidden_dim=m["moe_ffn"], num_experts=m["experts"], top_k=m["top_k"], attn_backend="flex",
            moe_comm_backend="standard", rope=CosSinRoPE.Config(dim=m["head_dim"], max_seq_len=4096, theta=1e6)))
    if family == "deepseek_v3":
        from torchtitan.models.deepseek_v3 import DeepSeekV3Model, _build_dsv3_layers, _build_mtp_layers

        layers = _build_dsv3_layers(
            n_layers=m["layers"], n_dense_layers=m["first_dense"], dim=dim, n_heads=heads, q_lora_rank=m["q_lora_rank"],
            kv_lora_rank=m["kv_lora_rank"], qk_nope_head_dim=m["head_dim"], qk_rope_head_dim=m["rope_head_dim"],
            v_head_dim=m["v_head_dim"], mscale=1.0, dense_hidden_dim=m["ffn"], moe_hidden_dim=m["moe_ffn"],
            num_experts=m["experts"], num_shared_experts=m["shared_ffn"] // m["moe_ffn"], router_top_k=m["top_k"],
            router_score_func=m["router_score"], attn_backend="flex", moe_comm_backend="standard",
            non_blocking_capacity_factor=None,
            rope=ComplexRoPE.Config(dim=m["rope_head_dim"], max_seq_len=4096, theta=10000.0))
        return DeepSeekV3Model.Config(**common, layers=layers, mtp_layers=_build_mtp_layers(layers[-1], dim=dim,
                                                                                             num_mtp_layers=0))
    raise ValueError(family)


def _vit_block(m: dict):
    """torchtitan's common vision transformer block (``VisionTransformerBlock``: LayerNorms, q/k/v/proj and a
    GELU MLP) of the scaled tower's widths, with its TP sharding config."""
    import spmd_types as spmd
    from torchtitan.models.common import Linear
    from torchtitan.models.common.nn_modules import LayerNorm
    from torchtitan.models.common.vision_encoder import VisionAttention, VisionMLP, VisionTransformerBlock
    from torchtitan.models.common.vision_encoder_sharding import set_vision_transformer_block_sharding_config

    d, f, bias, qkv = m["hidden"], m["ffn"], m["bias"], m["qkv_bias"]
    block = VisionTransformerBlock.Config(
        norm1=LayerNorm.Config(normalized_shape=d), norm2=LayerNorm.Config(normalized_shape=d),
        attn=VisionAttention.Config(dim=d, num_heads=m["heads"], wq=Linear.Config(in_features=d, out_features=d, bias=qkv),
                                    wk=Linear.Config(in_features=d, out_features=d, bias=qkv),
                                    wv=Linear.Config(in_features=d, out_features=d, bias=qkv),
                                    proj=Linear.Config(in_features=d, out_features=d, bias=bias)),
        mlp=VisionMLP.Config(fc1=Linear.Config(in_features=d, out_features=f, bias=bias),
                             fc2=Linear.Config(in_features=f, out_features=d, bias=bias)))
    set_vision_transformer_block_sharding_config(block, rope_cache_dp=spmd.R)
    return block


def _shard(family: str, cfg, ep: int) -> None:
    """The family's sharding config, as its ``update_from_config`` sets it (no sequence parallelism: weights alike)."""
    if family == "llama3":
        from torchtitan.models.llama3.sharding import set_llama3_sharding_config as setter
        setter(cfg, enable_sp=False)
        return
    if family == "qwen3":
        from torchtitan.models.qwen3.sharding import set_qwen3_sharding_config as setter
    else:
        from torchtitan.models.deepseek_v3.sharding import set_deepseek_v3_sharding_config as setter
    setter(cfg, enable_sp=False, enable_ep=ep > 1)


def _top(name: str) -> str:
    parts = name.split(".")
    return ".".join(parts[:2]) if parts[0] == "layers" else parts[0]


def _run(job: dict) -> dict:
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore
    from torchtitan.distributed.parallel_dims import ParallelDims

    par = job["parallelism"]
    rep, shard = par.get("data_parallel_replicate_degree", 1), par.get("data_parallel_shard_degree", 1)
    tp, ep = par["tensor_parallel_degree"], par.get("expert_parallel_degree", 1)
    world = rep * shard * tp
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world)
    try:
        dims = ParallelDims(dp_replicate=rep, dp_shard=shard, cp=1, tp=tp, pp=1, ep=ep, world_size=world)
        dims.build_mesh()
        if job["family"] == "vit":
            with torch.device("meta"):
                block = _vit_block(job["llm"]).build()
            block.parallelize(dims)
            held = sum((p.to_local() if hasattr(p, "to_local") else p).numel() for p in block.parameters())
            return {"id": job["id"], "stages": [{"params": held, "experts": 0}]}
        cfg = _config(job["family"], job["llm"])
        _shard(job["family"], cfg, ep)
        with torch.device("meta"):
            model = cfg.build()
        model.parallelize(dims)
        out = []
        for part in job["parts"]:
            names = set(part)
            held = [(n, p) for n, p in model.named_parameters() if _top(n) in names]
            local = [(n, (p.to_local() if hasattr(p, "to_local") else p).numel()) for n, p in held]
            out.append({"params": sum(k for _, k in local),
                        "experts": sum(k for n, k in local if ".routed_experts." in n)})
        return {"id": job["id"], "stages": out}
    finally:
        dist.destroy_process_group()


def main() -> None:
    jobs = json.loads(open(sys.argv[1]).read())
    print(json.dumps([_run(job) for job in jobs]))


if __name__ == "__main__":
    main()
