"""Hugging Face ``config.json`` import (see :mod:`.base`)."""
from __future__ import annotations

from .base import HF_TYPES, model_from_hf_config

__all__ = ["model_from_hf_config", "HF_TYPES"]
