"""The build backend: setuptools' own, building out of the source tree.

setuptools writes ``build/`` and ``partitioner.egg-info/`` into the project
directory by default, so ``pip install .`` fails on a read-only checkout
(issue 15). This wrapper points both at a fresh temporary directory through
an extra distutils configuration file (``DIST_EXTRA_CONFIG``) before
delegating every hook to :mod:`setuptools.build_meta`; the directory is
removed when the build process exits. The source tree is only read.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F401,F403  (the PEP 517/660 hooks)

__all__ = list(getattr(_setuptools, "__all__", ()))


def _build_out_of_tree() -> None:
    scratch = tempfile.mkdtemp(prefix="partitioner-build-")
    atexit.register(shutil.rmtree, scratch, True)
    config = os.path.join(scratch, "out-of-tree.cfg")
    with open(config, "w", encoding="utf-8") as f:
        f.write(f"[build]\nbuild_base = {os.path.join(scratch, 'build')}\n[egg_info]\negg_base = {scratch}\n")
    os.environ["DIST_EXTRA_CONFIG"] = config


_build_out_of_tree()
