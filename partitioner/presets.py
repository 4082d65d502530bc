"""Model and cluster presets: architectures with published dimensions, GPU nodes.

A *model spec* lists the modules of a multimodal model in execution order
(vision encoders, a projector, the language model, an action expert or
head), each with the dimensions of its matmuls. A *cluster spec* describes
one kind of GPU node. Both are read from YAML files (``models/*.yaml`` and
``models/clusters/*.yaml``, shipped inside the package as
``partitioner/_presets``), from a path, or -- for single transformers --
from a Hugging Face ``config.json`` (Llama, Qwen2, Gemma, CLIP, SigLIP).

Every preset names the source of its numbers (paper or model card) in its
``references`` and each module's ``source``. Parameter counts are computed
from the shapes (:func:`module_params`), so a preset's published total
checks its dimensions.

Errors in a file raise :class:`~partitioner.problem.ProblemError` naming
the file and the field, like the problem loader.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Mapping

from .problem import ProblemError, read_document

__all__ = [
    "ModuleSpec",
    "ModelSpec",
    "ClusterSpec",
    "MODULE_KINDS",
    "preset_dirs",
    "list_models",
    "list_clusters",
    "load_model",
    "load_cluster",
    "model_from_dict",
    "cluster_from_dict",
    "model_from_hf_config",
    "module_params",
    "module_layer_params",
]

MODULE_KINDS = ("vit", "projector", "llm", "action_expert", "action_head")
PRESET_ENV = "PARTITIONER_PRESETS"


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class ModuleSpec:
    """One module of a model, with the dimensions of its matmuls.

    Only the fields of the module's ``kind`` are used:

    * ``vit`` -- a vision transformer: ``layers, hidden, heads, ffn``; images
      of ``image_size`` px cut in ``patch`` px patches (``temporal_patch``
      frames per patch for video-capable encoders), ``images`` per sample,
      ``extra_tokens`` (class and register tokens); bidirectional attention.
    * ``projector`` -- an MLP ``in_dim -> dims[0] -> ... -> dims[-1]`` over
      ``tokens`` tokens per sample (optionally a norm of ``pre_norm_dim``).
    * ``llm`` -- a decoder: ``layers, hidden, heads, kv_heads, head_dim,
      ffn, gated, vocab``; ``text_tokens`` per sample on top of the image
      tokens; causal attention (``attention: prefix`` makes the prefix
      bidirectional, as in PaliGemma); ``lm_head`` adds the output layer and
      the loss.
    * ``action_expert`` -- a second transformer that shares attention with
      the LLM at every layer (pi0): ``tokens`` suffix tokens, same layer
      count as the LLM; the problem fuses LLM layer i and expert layer i.
    * ``action_head`` -- a transformer after the LLM over ``tokens`` action
      tokens plus ``cond_tokens`` conditioning tokens projected from the
      LLM's last hidden states; ``passes`` forward passes per sample.
    """

    name: str
    kind: str
    layers: int = 1
    hidden: int = 0
    heads: int = 1
    kv_heads: int = 0  # 0: same as heads
    head_dim: int = 0  # 0: hidden / heads
    ffn: int = 0
    gated: bool = False  # gated MLP (SwiGLU / GeGLU): three matrices instead of two
    bias: bool = False  # linear layers carry biases
    qkv_bias: bool = False
    norm: str = "layernorm"  # layernorm (weight + bias) | rmsnorm (weight)
    layerscale: bool = False
    qk_norm: bool = False
    activation: str = "gelu"  # MLP activation: gelu | gelu_tanh | silu | quick_gelu (x * sigmoid(1.702 x))
    fused_qkv: bool = False  # one QKV projection (its output stays alive through V's view when Q, K are rotated)
    dropout: bool = False  # trained with dropout (attention and residual): masks are kept
    final_norm: bool = True
    # vit
    patch: int = 14
    image_size: int = 224
    images: int = 1
    channels: int = 3
    temporal_patch: int = 1
    extra_tokens: int = 0
    pos_embed: str = "learned"  # learned | none (rotary)
    pre_norm: bool = False  # a norm before the first block (CLIP)
    output_tokens: int = 0  # patch tokens per image handed on (0: all patches)
    # projector
    in_dim: int = 0
    dims: tuple[int, ...] = ()
    tokens: int = 0
    pre_norm_dim: int = 0
    # llm
    vocab: int = 0
    tie_embeddings: bool = False
    text_tokens: int = 0
    lm_head: bool = True
    attention: str = "causal"  # causal | prefix | bidirectional
    # action expert / head
    action_dim: int = 0
    state_dim: int = 0
    cond_tokens: int = 0
    cond_dim: int = 0
    passes: int = 1
    # training
    frozen: bool = False
    # provenance and export hints
    source: str = ""
    fqn: Mapping[str, Any] = field(default_factory=dict)

    @property
    def n_kv_heads(self) -> int:
        return self.kv_heads or self.heads

    @property
    def d_head(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def attn_dim(self) -> int:
        """Width of the query (and output-projection input): heads x head_dim."""
        return self.heads * self.d_head

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.d_head

    @property
    def patches_per_image(self) -> int:
        return (self.image_size // self.patch) ** 2

    @property
    def tokens_per_image(self) -> int:
        """Tokens a vision encoder's attention sees per image."""
        return self.patches_per_image + self.extra_tokens

    @property
    def out_dim(self) -> int:
        """Width of the tensor the module hands on."""
        if self.kind == "projector":
            return self.dims[-1]
        return self.hidden


@dataclass(frozen=True)
class ModelSpec:
    """A model: modules in execution order, plus what one training sample holds."""

    name: str
    modules: tuple[ModuleSpec, ...]
    title: str = ""
    published_params: float | None = None
    references: Mapping[str, str] = field(default_factory=dict)
    notes: str = ""
    source: str | None = field(default=None, compare=False)

    def module(self, name: str) -> ModuleSpec:
        for m in self.modules:
            if m.name == name:
                return m
        raise KeyError(name)

    def of_kind(self, kind: str) -> list[ModuleSpec]:
        return [m for m in self.modules if m.kind == kind]

    @property
    def llm(self) -> ModuleSpec | None:
        found = self.of_kind("llm")
        return found[0] if found else None

    @property
    def image_tokens(self) -> int:
        """Image tokens per sample entering the language model (the projectors' output)."""
        return sum(m.tokens for m in self.of_kind("projector"))

    @property
    def llm_tokens(self) -> int:
        """Sequence length of the language model per sample."""
        llm = self.llm
        return self.image_tokens + (llm.text_tokens if llm else 0)

    @property
    def params(self) -> int:
        return sum(module_params(m) for m in self.modules)

    def summary(self) -> dict[str, Any]:
        """``{"name", "params", "modules": [{"name", "kind", "layers", "params"}]}`` (CLI ``models --json``)."""
        doc: dict[str, Any] = {
            "name": self.name,
            "params": self.params,
            "modules": [
                {"name": m.name, "kind": m.kind, "layers": m.layers, "params": module_params(m)} for m in self.modules
            ],
        }
        if self.title:
            doc["title"] = self.title
        if self.published_params:
            doc["published_params"] = self.published_params
        return doc


@dataclass(frozen=True)
class ClusterSpec:
    """One kind of GPU node; ``nodes`` is chosen when a problem is built."""

    name: str
    gpus_per_node: int
    gpu_memory_bytes: int
    peak_tflops: float  # dense bf16 tensor-core peak per GPU
    intra_node_GBps: float  # NVLink, per GPU and direction
    inter_node_GBps: float  # network, per GPU and direction
    gpu: str = ""
    title: str = ""
    references: Mapping[str, str] = field(default_factory=dict)
    source: str | None = field(default=None, compare=False)

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "gpu": self.gpu,
            "gpus_per_node": self.gpus_per_node,
            "gpu_memory_bytes": self.gpu_memory_bytes,
            "peak_tflops": self.peak_tflops,
            "intra_node_GBps": self.intra_node_GBps,
            "inter_node_GBps": self.inter_node_GBps,
        }


# --------------------------------------------------------------------------- parameter counts


def _norm_params(spec: ModuleSpec, width: int) -> int:
    return 2 * width if spec.norm == "layernorm" else width


def _linear(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


def block_params(spec: ModuleSpec) -> int:
    """Parameters of one transformer block of ``spec`` (vit, llm, action expert or head)."""
    h = spec.hidden
    qkv_bias = spec.qkv_bias or spec.bias
    p = _linear(h, spec.attn_dim + 2 * spec.kv_dim, qkv_bias)
    p += _linear(spec.attn_dim, h, spec.bias)
    n_mlp_in = 2 if spec.gated else 1
    p += n_mlp_in * _linear(h, spec.ffn, spec.bias) + _linear(spec.ffn, h, spec.bias)
    p += 2 * _norm_params(spec, h)
    if spec.layerscale:
        p += 2 * h
    if spec.qk_norm:
        p += 2 * _norm_params(spec, spec.attn_dim)
    return p


def module_layer_params(spec: ModuleSpec) -> dict[str, int]:
    """Parameters by part: ``pre`` (before the first block), ``block`` (each), ``post`` (after the last).

    For an ``llm``, ``pre`` is the token embedding and ``post`` the final
    norm plus an untied LM head; for a projector everything is ``pre``.
    """
    k = spec.kind
    if k == "projector":
        p = 2 * spec.pre_norm_dim if spec.pre_norm_dim else 0
        d = spec.in_dim
        for out in spec.dims:
            p += _linear(d, out, True)
            d = out
        return {"pre": p, "block": 0, "post": 0}
    block = block_params(spec)
    h = spec.hidden
    post = _norm_params(spec, h) if spec.final_norm else 0
    if k == "vit":
        pre = spec.channels * spec.temporal_patch * spec.patch**2 * h + (h if spec.bias else 0)
        if spec.pos_embed == "learned":
            pre += spec.tokens_per_image * h
        pre += spec.extra_tokens * h
        if spec.pre_norm:
            pre += _norm_params(spec, h)
        return {"pre": pre, "block": block, "post": post}
    if k == "llm":
        pre = spec.vocab * h
        if spec.lm_head and not spec.tie_embeddings:
            post += spec.vocab * h
        return {"pre": pre, "block": block, "post": post}
    if k == "action_expert":
        # pi0: state and noisy-action projections, the time MLP (in), the action output projection (out)
        pre = _linear(spec.state_dim, h, True) + _linear(spec.action_dim, h, True)
        pre += _linear(2 * h, h, True) + _linear(h, h, True)
        post += _linear(h, spec.action_dim, True)
        return {"pre": pre, "block": block, "post": post}
    if k == "action_head":
        pre = _linear(spec.cond_dim, h, True) + _linear(spec.action_dim, h, True)
        post += _linear(h, spec.action_dim, True)
        return {"pre": pre, "block": block, "post": post}
    raise ValueError(f"unknown module kind {k!r}")


def module_params(spec: ModuleSpec) -> int:
    """Total parameters of a module, counted from its shapes."""
    parts = module_layer_params(spec)
    return parts["pre"] + spec.layers * parts["block"] + parts["post"]


# --------------------------------------------------------------------------- where presets live


def preset_dirs() -> list[Path]:
    """Folders searched for presets, in order.

    ``$PARTITIONER_PRESETS`` (``os.pathsep``-separated), the copy shipped in
    the installed package (``partitioner/_presets``), then the source
    tree's ``models/`` folder (running from a checkout).
    """
    dirs: list[Path] = []
    env = os.environ.get(PRESET_ENV)
    if env:
        dirs.extend(Path(p) for p in env.split(os.pathsep) if p)
    here = Path(__file__).resolve().parent
    dirs.append(here / "_presets")
    dirs.append(here.parent / "models")
    return [d for d in dirs if d.is_dir()]


def _preset_files(sub: str | None) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for d in preset_dirs():
        folder = d / sub if sub else d
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.y*ml")):
            found.setdefault(path.stem, path)
    return found


def list_models() -> list[str]:
    """Names of the model presets."""
    return sorted(_preset_files(None))


def list_clusters() -> list[str]:
    """Names of the cluster presets."""
    return sorted(_preset_files("clusters"))


def _resolve(name_or_path: str | os.PathLike, sub: str | None, what: str) -> Path:
    text = os.fspath(name_or_path)
    path = Path(text)
    if path.suffix.lower() in (".yaml", ".yml", ".json") or os.sep in text or path.is_file():
        if not path.is_file():
            raise ProblemError("file not found", source=text)
        return path
    files = _preset_files(sub)
    if text not in files:
        known = ", ".join(sorted(files)) or "none found"
        raise ProblemError(f"unknown {what} {text!r} (presets: {known}; or give a path to a YAML file)")
    return files[text]


def load_model(name_or_path: str | os.PathLike | ModelSpec) -> ModelSpec:
    """A model spec from a preset name, a preset YAML file or a Hugging Face ``config.json``."""
    if isinstance(name_or_path, ModelSpec):
        return name_or_path
    path = _resolve(name_or_path, None, "model")
    data = read_document(path)
    if path.suffix.lower() == ".json" and isinstance(data, Mapping) and "model_type" in data:
        return model_from_hf_config(data, source=str(path))
    return model_from_dict(data, source=str(path))


def load_cluster(name_or_path: str | os.PathLike | ClusterSpec) -> ClusterSpec:
    """A cluster spec from a preset name or a YAML file."""
    if isinstance(name_or_path, ClusterSpec):
        return name_or_path
    path = _resolve(name_or_path, "clusters", "cluster")
    return cluster_from_dict(read_document(path), source=str(path))


# --------------------------------------------------------------------------- validation

_INT_FIELDS = {
    "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "patch", "image_size", "images", "channels",
    "temporal_patch", "extra_tokens", "output_tokens", "in_dim", "tokens", "pre_norm_dim", "vocab", "text_tokens",
    "action_dim", "state_dim", "cond_tokens", "cond_dim", "passes",
}  # fmt: skip
_BOOL_FIELDS = {"gated", "bias", "qkv_bias", "layerscale", "qk_norm", "dropout", "fused_qkv", "final_norm", "pre_norm", "tie_embeddings", "lm_head", "frozen"}
_CHOICES = {"activation": ("gelu", "gelu_tanh", "silu", "quick_gelu"), "norm": ("layernorm", "rmsnorm"), "pos_embed": ("learned", "none"), "attention": ("causal", "prefix", "bidirectional")}
_REQUIRED = {
    "vit": ("layers", "hidden", "heads", "ffn", "patch", "image_size"),
    "projector": ("in_dim", "dims", "tokens"),
    "llm": ("layers", "hidden", "heads", "ffn", "vocab", "text_tokens"),
    "action_expert": ("layers", "hidden", "heads", "ffn", "tokens", "action_dim"),
    "action_head": ("layers", "hidden", "heads", "ffn", "tokens", "action_dim", "cond_dim"),
}
_MODULE_FIELDS = {f.name for f in fields(ModuleSpec)}


def _fail(reason: str, path: str, source: str | None) -> ProblemError:
    return ProblemError(reason, path=path, source=source)


def _module_from_dict(data: Any, path: str, source: str | None) -> ModuleSpec:
    if not isinstance(data, Mapping):
        raise _fail("must be an object", path, source)
    for key in ("name", "kind"):
        if key not in data:
            raise _fail("is missing", f"{path}.{key}", source)
    kind = data["kind"]
    if kind not in MODULE_KINDS:
        raise _fail(f"must be one of {', '.join(MODULE_KINDS)}, got {kind!r}", f"{path}.kind", source)
    values: dict[str, Any] = {}
    for key, value in data.items():
        where = f"{path}.{key}"
        if key not in _MODULE_FIELDS:
            raise _fail(f"unknown field {key!r}", where, source)
        if key in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _fail(f"must be a non-negative integer, got {value!r}", where, source)
        elif key in _BOOL_FIELDS:
            if not isinstance(value, bool):
                raise _fail(f"must be true or false, got {value!r}", where, source)
        elif key in _CHOICES:
            if value not in _CHOICES[key]:
                raise _fail(f"must be one of {', '.join(_CHOICES[key])}, got {value!r}", where, source)
        elif key == "dims":
            if not isinstance(value, list) or not value or not all(isinstance(v, int) and v > 0 for v in value):
                raise _fail("must be a non-empty list of positive integers", where, source)
            value = tuple(value)
        elif key == "fqn":
            if not isinstance(value, Mapping):
                raise _fail("must be an object (pre, block, post: module names)", where, source)
            value = dict(value)
        elif key in ("name", "kind", "source"):
            if not isinstance(value, str):
                raise _fail(f"must be a string, got {value!r}", where, source)
        values[key] = value
    for key in _REQUIRED[kind]:
        if key not in values:
            raise _fail(f"is missing (a {kind} module needs {', '.join(_REQUIRED[kind])})", f"{path}.{key}", source)
    for key in ("layers", "hidden", "heads", "ffn"):
        if key in values and values[key] == 0 and kind != "projector":
            raise _fail("must be >= 1", f"{path}.{key}", source)
    spec = ModuleSpec(**values)
    if kind != "projector":
        if not spec.head_dim and spec.hidden % spec.heads:
            raise _fail(f"hidden {spec.hidden} is not divisible by heads {spec.heads} (give head_dim)", f"{path}.heads", source)
        if spec.heads % spec.n_kv_heads:
            raise _fail(f"heads {spec.heads} must be a multiple of kv_heads {spec.n_kv_heads}", f"{path}.kv_heads", source)
    if kind == "vit" and spec.image_size % spec.patch:
        raise _fail(f"image_size {spec.image_size} is not a multiple of patch {spec.patch}", f"{path}.image_size", source)
    return spec


def model_from_dict(data: Any, *, source: str | None = None) -> ModelSpec:
    """Validate a model preset document (see ``models/*.yaml``)."""
    if not isinstance(data, Mapping):
        raise ProblemError("a model preset must be an object", source=source)
    allowed = {"name", "title", "published_params", "references", "notes", "modules"}
    for key in data:
        if key not in allowed:
            raise _fail(f"unknown field {key!r} (allowed: {', '.join(sorted(allowed))})", key, source)
    if "name" not in data or not isinstance(data["name"], str):
        raise _fail("is missing (a string)", "name", source)
    mods = data.get("modules")
    if not isinstance(mods, list) or not mods:
        raise _fail("must be a non-empty list", "modules", source)
    modules = tuple(_module_from_dict(m, f"modules[{i}]", source) for i, m in enumerate(mods))
    names = [m.name for m in modules]
    if len(set(names)) != len(names):
        raise _fail("module names must be unique", "modules", source)
    llms = [m for m in modules if m.kind == "llm"]
    if len(llms) > 1:
        raise _fail("at most one llm module", "modules", source)
    for i, m in enumerate(modules):
        if m.kind == "action_expert":
            if not llms or llms[0].layers != m.layers:
                raise _fail("an action expert shares attention with the llm at every layer: it needs an llm with the same layer count", f"modules[{i}].layers", source)
        if m.kind == "projector" and m.tokens == 0:
            raise _fail("must be >= 1", f"modules[{i}].tokens", source)
    published = data.get("published_params")
    if published is not None and (isinstance(published, bool) or not isinstance(published, (int, float)) or published <= 0):
        raise _fail("must be a positive number", "published_params", source)
    refs = data.get("references") or {}
    if not isinstance(refs, Mapping):
        raise _fail("must be an object (key: citation)", "references", source)
    return ModelSpec(
        name=data["name"],
        modules=modules,
        title=str(data.get("title") or ""),
        published_params=float(published) if published is not None else None,
        references=dict(refs),
        notes=str(data.get("notes") or ""),
        source=source,
    )


def cluster_from_dict(data: Any, *, source: str | None = None) -> ClusterSpec:
    """Validate a cluster preset document (see ``models/clusters/*.yaml``)."""
    if not isinstance(data, Mapping):
        raise ProblemError("a cluster preset must be an object", source=source)
    required = ("name", "gpus_per_node", "gpu_memory_bytes", "peak_tflops", "intra_node_GBps", "inter_node_GBps")
    optional = ("gpu", "title", "references")
    for key in data:
        if key not in required + optional:
            raise _fail(f"unknown field {key!r} (allowed: {', '.join(required + optional)})", key, source)
    for key in required:
        if key not in data:
            raise _fail("is missing", key, source)
    for key in required[1:]:
        v = data[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
            raise _fail(f"must be a positive number, got {v!r}", key, source)
    for key in ("gpus_per_node", "gpu_memory_bytes"):
        if not float(data[key]).is_integer():
            raise _fail(f"must be an integer, got {data[key]!r}", key, source)
    return ClusterSpec(
        name=str(data["name"]),
        gpus_per_node=int(data["gpus_per_node"]),
        gpu_memory_bytes=int(data["gpu_memory_bytes"]),
        peak_tflops=float(data["peak_tflops"]),
        intra_node_GBps=float(data["intra_node_GBps"]),
        inter_node_GBps=float(data["inter_node_GBps"]),
        gpu=str(data.get("gpu") or ""),
        title=str(data.get("title") or ""),
        references=dict(data.get("references") or {}),
        source=source,
    )


# --------------------------------------------------------------------------- Hugging Face configs

_HF_LLM = {"llama", "qwen2", "gemma", "mistral"}
_HF_VISION = {"clip_vision_model", "siglip_vision_model", "clip", "siglip"}


def model_from_hf_config(
    config: Mapping[str, Any], *, source: str | None = None, text_tokens: int = 2048, images: int = 1
) -> ModelSpec:
    """A one-module model spec from a Hugging Face ``config.json``.

    Supported ``model_type``: ``llama``, ``qwen2``, ``gemma`` (decoders; the
    sequence has ``text_tokens`` tokens) and ``clip_vision_model`` /
    ``siglip_vision_model`` or the ``clip`` / ``siglip`` pair configs (their
    ``vision_config``; ``images`` images per sample). Field names follow the
    transformers configuration classes (``hidden_size``,
    ``num_hidden_layers``, ``num_attention_heads``, ``num_key_value_heads``,
    ``intermediate_size``, ``vocab_size``, ``image_size``, ``patch_size``).
    """
    if not isinstance(config, Mapping) or "model_type" not in config:
        raise ProblemError("is missing (not a Hugging Face config.json?)", path="model_type", source=source)
    mtype = config["model_type"]
    if mtype in ("clip", "siglip"):
        vision = config.get("vision_config")
        if not isinstance(vision, Mapping):
            raise ProblemError("is missing", path="vision_config", source=source)
        config, mtype = vision, f"{mtype}_vision_model"

    def get(key: str, default: Any = None) -> Any:
        if key in config:
            return config[key]
        if default is None:
            raise ProblemError("is missing", path=key, source=source)
        return default

    name = Path(source).parent.name if source else str(mtype)
    if mtype in _HF_LLM:
        hidden, heads = int(get("hidden_size")), int(get("num_attention_heads"))
        spec = ModuleSpec(
            name="llm",
            kind="llm",
            layers=int(get("num_hidden_layers")),
            hidden=hidden,
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            ffn=int(get("intermediate_size")),
            gated=True,
            qkv_bias=mtype == "qwen2",
            norm="rmsnorm",
            vocab=int(get("vocab_size")),
            tie_embeddings=bool(config.get("tie_word_embeddings", mtype == "gemma")),
            text_tokens=text_tokens,
            source=f"Hugging Face config ({source or mtype})",
            fqn={"pre": ["model.embed_tokens"], "block": "model.layers.{i}", "post": ["model.norm", "lm_head"]},
        )
    elif mtype in _HF_VISION:
        siglip = mtype.startswith("siglip")
        spec = ModuleSpec(
            name="vision",
            kind="vit",
            layers=int(get("num_hidden_layers")),
            hidden=int(get("hidden_size")),
            heads=int(get("num_attention_heads")),
            ffn=int(get("intermediate_size")),
            bias=True,
            norm="layernorm",
            patch=int(get("patch_size")),
            image_size=int(get("image_size")),
            images=images,
            extra_tokens=0 if siglip else 1,
            pre_norm=not siglip,
            source=f"Hugging Face config ({source or mtype})",
            fqn={"pre": ["vision_model.embeddings"], "block": "vision_model.encoder.layers.{i}", "post": ["vision_model.post_layernorm"]},
        )
    else:
        raise ProblemError(
            f"unsupported model_type {mtype!r} (supported: {', '.join(sorted(_HF_LLM | _HF_VISION))})",
            path="model_type",
            source=source,
        )
    return ModelSpec(name=name, modules=(spec,), title=f"{mtype} from config.json", source=source)


def with_module(model: ModelSpec, name: str, **changes: Any) -> ModelSpec:
    """A copy of ``model`` with fields of module ``name`` changed (e.g. ``frozen=True``)."""
    return replace(model, modules=tuple(replace(m, **changes) if m.name == name else m for m in model.modules))
