"""Which torchtitan 0.3 model a plan's job starts from (:func:`titan_model`), and what of the model it trains.

:data:`TITAN_MODELS`: the family and flavor of a preset's language model (``qwen3`` 30B-A3B / 235B-A22B for
Qwen3-VL, ``deepseek_v3`` 671B). A MoE preset without one (GLM-4.5V, Kimi-K2) starts from a placeholder
(:data:`NO_FAMILY`), never a dense stand-in; a dense one from :data:`DENSE_BASE`, a template. These families
build the language model only: a VLM's vision tower is not trained by them, and the export says so.

The detail, and the references cited above: ``docs/internals/frameworks.md``, section ``partitioner.frameworks.torchtitan.models``.
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

__all__ = ["TitanModel", "TITAN_MODELS", "DENSE_BASE", "NO_FAMILY", "titan_model"]


@dataclass(frozen=True)
class TitanModel:
    """A torchtitan family, the ``config_registry`` function a job starts from, and the preset's flavor."""

    family: str
    config: str
    flavor: str
    config_flavor: str  # the flavor the config function itself builds

    @property
    def base(self) -> str:
        """The config function's dotted path."""
        return f"torchtitan.models.{self.family}.config_registry.{self.config}"


TITAN_MODELS: Mapping[str, TitanModel] = MappingProxyType({
    "qwen3-vl-30b-a3b": TitanModel("qwen3", "qwen3_30b_a3b", "30B-A3B", "30B-A3B"),
    "qwen3-vl-235b-a22b": TitanModel("qwen3", "qwen3_30b_a3b", "235B-A22B", "30B-A3B"),
    "deepseek-v3": TitanModel("deepseek_v3", "deepseek_v3_671b", "671B", "671B"),
})
"""Preset -> the torchtitan 0.3 family and flavor of its language model (torchtitan 0.3.0
``torchtitan/models/qwen3/__init__.py`` ``qwen3_configs``, ``models/deepseek_v3/__init__.py``
``deepseekv3_configs``, and their ``config_registry.py``)."""

DENSE_BASE = "torchtitan.models.llama3.config_registry.llama3_8b"
"""The base of a dense model without a matched family (a template: the user's model replaces it)."""

NO_FAMILY = "your_package.config_registry.your_model"
"""The placeholder base of a MoE model torchtitan 0.3 has no family for (never a dense stand-in)."""

_WHY_NONE = {
    "glm-4.5v": "torchtitan 0.3 has no GLM family (its MoE families: qwen3, deepseek_v3, kimi_k2_7, gpt_oss, qwen3_5)",
    "kimi-k2": "torchtitan 0.3 has Kimi-K2's text tower only inside its Kimi-K2.5 VLM (kimi_k2_7 flavor Kimi-K2.5, "
               "with a MoonViT vision tower), not as a language model",
}


def titan_model(model: str | None, moe: bool) -> tuple[TitanModel | None, str, str | None]:
    """(the matched model or None, the base config function, why there is none for a MoE model)."""
    found = TITAN_MODELS.get(model or "")
    if found is not None:
        return found, found.base, None
    if moe:
        return None, NO_FAMILY, _WHY_NONE.get(model or "", f"torchtitan 0.3 has no family recorded for {model or 'this model'}")
    return None, DENSE_BASE, None
