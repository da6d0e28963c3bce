"""context-paging: a rolling context window for coding agents, and tools to page history back in.

The project keeps its three folders (``server/``, ``paging/``, ``index/``) at the top of the
repository, and installs them under this one package (``context_paging.server`` and so on,
through setuptools' package-dir mapping) so that an install never puts a generic ``server`` or
``index`` module on anyone's path.
"""

from __future__ import annotations

from importlib import metadata as _metadata
from pathlib import Path as _Path

try:
    __version__ = _metadata.version("context-paging-mcp")
except _metadata.PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"

# Run from a source checkout without an install (``python -m pytest`` at the root with nothing
# installed), the sub-packages live beside this folder rather than inside it.
_here = _Path(__file__).resolve().parent
if not (_here / "server").is_dir() and (_here.parent / "pyproject.toml").is_file():
    __path__.append(str(_here.parent))  # noqa: F821 - the package's own search path
