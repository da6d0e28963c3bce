"""What binds a tool function to its server: the :class:`Deps` value every tool is given, and
:func:`bind`, which hides that parameter from the SDK and translates anticipated failures."""

from __future__ import annotations

import functools
import inspect
import threading
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread
from context_paging.server.config import Settings
from context_paging.server.errors import Failure, failure
from context_paging.server.idle import Idler
from context_paging.server.mcp.sampling import Sampler
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError

if TYPE_CHECKING:
    from context_paging.index.service import History

T = TypeVar("T")


class ToolFailure(Exception):
    """An anticipated failure raised by the server itself, shown to the model as
    ``CODE: message``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True, slots=True)
class Deps:
    """What every tool function is given: one value per server, never a global."""

    history: History
    settings: Settings
    # Held while a History call runs; ``serve`` takes it on Ctrl-C so a ledger append or an
    # index commit finishes before the process exits.
    lock: threading.Lock
    sampler: Sampler
    # Spare-time work after select_context replies (server/idle.py); it yields the lock to
    # any call waiting for it.
    idler: Idler | None = None

    async def run(self, fn: Callable[..., T], *args: Any, recovery: bool = True,
                  **kwargs: Any) -> T:
        """Run a blocking History call in a worker thread, one at a time. Its errors propagate;
        the tool's binding translates them (:func:`bind`)."""
        if recovery and not self.settings.paging_enabled:
            raise ToolFailure("DISABLED", "context paging is disabled in this server's settings "
                              "([paging] enabled = false); the recovery tools are off")

        def locked() -> T:
            if self.idler is None:
                with self.lock:
                    return fn(*args, **kwargs)
            self.idler.enter()  # idle work under way stops at its next count
            try:
                self.lock.acquire()
            finally:
                self.idler.leave()
            try:
                return fn(*args, **kwargs)
            finally:
                self.lock.release()

        return await anyio.to_thread.run_sync(locked)


def argument_failure(exc: ValidationError) -> Failure:
    """Arguments that fail the input schema, coded like every other failure: each bad field
    with the value given and the rule (pydantic's own text carries a URL and its layout)."""
    problems = []
    for error in exc.errors(include_url=False):
        field = ".".join(str(part) for part in error["loc"]) or "arguments"
        if error["type"] == "missing":
            problems.append(f"field {field!r} is required")
            continue
        given = repr(error.get("input"))
        given = given if len(given) <= 80 else given[:77] + "..."
        rule = error["msg"][:1].lower() + error["msg"][1:]
        problems.append(f"field {field!r} is {given}: {rule}")
    return Failure("INVALID_ARGUMENT", "; ".join(problems) + "; see the tool's input schema")


def error_result(failed: Failure) -> CallToolResult:
    return CallToolResult(is_error=True, content=[TextContent(type="text", text=failed.text)])



def bind(fn: Callable[..., Awaitable[T]], deps: Deps,
          translate: bool = True) -> Callable[..., Awaitable[T]]:
    """``fn`` with ``deps`` given and its signature without it (the SDK reads the signature for
    the input schema and the injected values); with ``translate``, anticipated failures become
    tool errors through the one translation (server/errors.py)."""
    hints = typing.get_type_hints(fn, include_extras=True)  # this module's strings, resolved
    hints.pop("deps", None)
    signature = inspect.signature(fn)
    params = [p.replace(annotation=hints.get(p.name, p.annotation))
              for p in signature.parameters.values() if p.name != "deps"]
    home = deps.settings.home

    @functools.wraps(fn)
    async def bound(*args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(deps, *args, **kwargs)
        except Exception as exc:
            failed = failure(exc, home) if translate else None
            if failed is None:
                raise  # a bug: the SDK reports it without its text
            return error_result(failed)

    bound.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=hints.get("return", signature.return_annotation))
    bound.__annotations__ = hints
    return bound
