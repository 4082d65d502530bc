"""Problem formats v1 and v2: the module moved to :mod:`partitioner.problem.model`, re-exported here unchanged."""
from __future__ import annotations

from .model import *  # noqa: F401,F403
from .model import __all__, _cost_doc, _Node, _parse_cost, _parse_cost_checked  # noqa: F401
