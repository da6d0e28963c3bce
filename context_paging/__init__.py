"""context-paging: a rolling context window for coding agents, and tools to page history back in.

The project keeps its three folders (``server/``, ``paging/``, ``index/``) at the top of the
repository, and installs them under this one package (``context_paging.server`` and so on,
through setuptools' package-dir mapping) so that an install never puts a generic ``server`` or
``index`` module on anyone's path.
"""

from __future__ import annotations

import os as _os

# The one place the version is written: pyproject.toml reads it from here at build time, so a
# command that only prints it never opens the installed metadata (importlib.metadata alone
# took longer than the rest of ``--version``).
__version__ = "0.1.0"

# Run from a source checkout without an install (``python -m pytest`` at the root with nothing
# installed), the sub-packages live beside this folder rather than inside it.
_here = _os.path.dirname(_os.path.realpath(__file__))  # os.path: pathlib costs --version 10 ms
_root = _os.path.dirname(_here)
if not _os.path.isdir(_os.path.join(_here, "server")) and _os.path.isfile(
        _os.path.join(_root, "pyproject.toml")):
    __path__.append(_root)  # noqa: F821 - the package's own search path
