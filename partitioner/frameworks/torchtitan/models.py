"""Which torchtitan 0.3 model a plan's job starts from (:func:`titan_model`), and what of the model it trains.

torchtitan trains the models of its own families (``torchtitan.models.<family>``:
a ``model_registry(flavor)`` of model configs and ``config_registry``
functions returning a ``Trainer.Config``) [1]_. The export names the family
and flavor whose language model is the preset's (:data:`TITAN_MODELS`,
each flavor's shape checked against the preset by the framework tier):

* Qwen3-VL-30B-A3B / -235B-A22B: ``qwen3`` with flavor ``30B-A3B`` /
  ``235B-A22B`` (Qwen3-MoE: the text models of these VLMs), starting from
  ``qwen3_30b_a3b`` (0.3 has no 235B config function: the flavor is set on
  its ``model_spec``);
* DeepSeek-V3: ``deepseek_v3`` flavor ``671B`` (``deepseek_v3_671b``).

A MoE preset without such a family (GLM-4.5V: torchtitan 0.3 has no GLM;
Kimi-K2: its text tower is in ``kimi_k2_7`` only inside the Kimi-K2.5 VLM,
with a MoonViT tower) gets no stand-in: the job starts from a config
function of the user's own (a placeholder, and a note). A dense model keeps
the ``llama3_8b`` base it had, named a template.

These families build the language model only: for a VLM preset torchtitan
does not train its vision tower (the plan's ``vision_encoder``); the export
says so and marks the job a template (``settings["launch"]``).

References
----------
.. [1] torchtitan 0.3.0, ``torchtitan/models/qwen3/__init__.py`` (``qwen3_configs``: ``30B-A3B``,
   ``235B-A22B``), ``models/qwen3/config_registry.py`` (``qwen3_30b_a3b``),
   ``models/deepseek_v3/__init__.py`` (``deepseekv3_configs``: ``671B``),
   ``models/deepseek_v3/config_registry.py`` (``deepseek_v3_671b``), ``models/kimi_k2_7/__init__.py``
   (``kimi_k2_5_configs``).
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
"""Preset -> the torchtitan 0.3 family and flavor of its language model [1]_."""

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
