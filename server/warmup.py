"""``serve``'s History, loaded on a background thread so the server answers at once.

Importing the index and the window and loading the tokenizer take longer than the MCP SDK's
own start. ``serve`` begins that work on a thread of its own as soon as it starts and answers
``initialize`` and ``tools/list`` meanwhile; by the time a client has listed the tools and its
first request is on the wire, the work is done or nearly (docs/performance-history.md, "Start-up").

Until then :class:`LoadingHistory` stands in for the History: every attribute it does not have
itself is one of the History's methods, fetched without waiting and, when called, run on the
loaded History. The tools call History methods only through ``Deps.run``, in a worker thread,
so the wait never holds up the event loop.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from context_paging.index.service import History
    from context_paging.paging.distill.config import DistillConfig

log = logging.getLogger("context_paging")


class LoadingHistory:
    """A History built by ``build()`` on a daemon thread; its methods wait for it."""

    def __init__(self, build: Callable[[], History], distill_config: DistillConfig,
                 then: Callable[[], None] | None = None) -> None:
        self._build = build
        self._then = then  # run once the History is loaded (``serve``: server/heap.py)
        self.distill_config = distill_config  # what the sampler needs before the History exists
        self._done = threading.Event()
        self._history: History | None = None
        self._error: BaseException | None = None
        self._started = threading.Lock()  # taken by whoever loads: the thread, or a first call

    def start(self) -> LoadingHistory:
        """Load on a daemon thread from now on (else the first call that needs it loads it)."""
        threading.Thread(target=self._load, name="context-paging-load", daemon=True).start()
        return self

    def _load(self) -> None:
        if not self._started.acquire(blocking=False):
            return  # loading already
        try:
            history = self._build()
            history.context  # noqa: B018  # the window's service and the tokenizer, loaded now
        except Exception as exc:  # shown to the tool call that needs the History
            log.warning("could not load the history: %s", exc)
            self._error = exc
        else:
            self._history = history
            if self._then is not None:
                self._then()
        finally:
            self._done.set()

    @property
    def ready(self) -> bool:
        return self._done.is_set()

    def loaded(self) -> History:
        """The History, once loaded. A load that failed raises its error here, once: the next
        call loads again (a full disk or a wrong permission may have been fixed since)."""
        self._load()
        self._done.wait()
        if self._history is None:
            error, self._error = self._error, None
            self._done.clear()
            self._started.release()
            assert error is not None
            raise error
        return self._history

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not a History method: never defer it
            raise AttributeError(name)
        return functools.partial(self._call, name)

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.loaded(), name)(*args, **kwargs)
