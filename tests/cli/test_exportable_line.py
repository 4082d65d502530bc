"""The ``exportable:`` line of ``plan`` says when a framework's export is a template, not a launch."""
from __future__ import annotations

from partitioner.cli.render import _exportable
from partitioner.frameworks.common import Export


def _export(launch: str | None, expressible: bool = True) -> Export:
    settings = {} if launch is None else {"launch": launch}
    return Export("megatron", settings, "", (), expressible, () if expressible else ("why",), "")


def test_a_template_is_said_to_be_one():
    assert _exportable(_export("command")) == "yes"
    assert _exportable(_export(None)) == "yes"
    assert _exportable(_export("template")) == "yes (a template, not a launch)"
    assert _exportable(_export("template", expressible=False)) == "no"
