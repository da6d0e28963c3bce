"""Anticipated failures as ``{code, message}``: the one translation the server uses.

Every package's error class carries its own ``code`` (a class attribute, or an instance
attribute where one class carries several codes: ``NavigatorError``, ``ContextSelectionError``),
so this module needs no table of exception types. The MCP tools show a failure to the model as
``CODE: message``; the CLI picks its exit status and wording from the code; the proxy logs it
before forwarding a request unchanged.

A plain ``OSError`` is a storage failure (disk full, read-only home, a file where a directory
belongs) only where a home is given to blame and advise on; without one it is not anticipated.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

STORAGE_ERROR = "STORAGE_ERROR"
_OURS = "context_paging."


@dataclass(frozen=True, slots=True)
class Failure:
    code: str
    message: str

    @property
    def text(self) -> str:
        """What a tool error's text says: the code first, so hosts can branch on it."""
        return f"{self.code}: {self.message}"


def failure(exc: BaseException, home: str | Path | None = None) -> Failure | None:
    """The failure ``exc`` stands for, or None when it is not one anyone anticipated (a bug:
    the caller lets it propagate)."""
    if isinstance(exc, OSError):
        if home is None:
            return None
        where = exc.filename or home
        return Failure(STORAGE_ERROR, f"cannot use {str(where)!r}: {exc.strerror or exc}; free "
                       f"space or fix the permissions under {str(home)!r}, then call again")
    code = getattr(exc, "code", None)
    # Only our own classes: other libraries use ``code`` for other things (SystemExit, HTTP).
    if isinstance(code, str) and type(exc).__module__.startswith(_OURS):
        return Failure(code, str(exc))
    return None
