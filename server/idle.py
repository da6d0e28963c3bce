"""The server's spare time: work a select_context call left for later, run after its reply.

``ContextService.idle`` counts ahead the older messages a call left uncounted (it only fills a
cache, so no reply changes). Inside the call it cost ~5 ms of every after_id request; here it
runs on a thread of its own once the reply has been written (``serve`` calls :meth:`Idler.kick`
after each write to stdout; a transport without that hook kicks when the tool returns) and no
new request came for ``IDLE_DELAY``, under the same lock as every History call, and stops as
soon as a request line comes in or a tool call waits for the lock: the cost to a new request
is at most the one count under way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("context_paging")

# Spare time per reply: counting 15 MiB of history exactly takes seconds of CPU; a host sends
# its next request seconds later, so a few of these slices each time catch up over a few calls
# without keeping a core busy.
IDLE_SECONDS = 0.05
# Idle work starts only once no request came for this long after the reply: a host that sends
# requests back to back (a script, a benchmark) is then never slowed by it, on a 2-core machine
# least of all (the client parses the reply meanwhile), and a model's answer takes far longer.
IDLE_DELAY = 0.05


class Idler:
    """Runs ``work(seconds, stop)`` (``History.idle``) on a daemon thread when kicked after
    work became due, holding ``lock``; ``stop`` answers true while a tool call waits."""

    def __init__(self, work: Callable[[float, Callable[[], bool]], bool],
                 lock: threading.Lock, seconds: float = IDLE_SECONDS,
                 delay: float = IDLE_DELAY) -> None:
        self._work = work
        self._lock = lock
        self._seconds = seconds
        self._delay = delay
        self._arrival = threading.Event()  # a request came (or waits) since the last kick
        self._state = threading.Lock()  # guards the fields below
        self._due = False
        self._waiting = 0
        self._arrived = False  # a request line came in since the last kick
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.hooked = False  # the transport kicks after each write (else the tool kicks)
        self.runs = 0  # slices run (tests read it)

    # --- what tool calls do -----------------------------------------------------------------

    def enter(self) -> None:
        """A tool call is about to wait for the lock: running idle work yields to it."""
        with self._state:
            self._waiting += 1
        self._arrival.set()

    def leave(self) -> None:
        with self._state:
            self._waiting -= 1

    def arrived(self) -> None:
        """The transport read a request line: stop idle work now, before the request is even
        parsed (its parsing needs the interpreter the idle thread would hold)."""
        self._arrived = True
        self._arrival.set()

    def due(self) -> None:
        """A select_context call left work (its reply is on its way): run it at the next kick,
        or right away when no transport kicks."""
        with self._state:
            self._due = True
        if not self.hooked:
            self.kick()

    def kick(self) -> None:
        """The reply is out: start the due work on the idle thread."""
        with self._state:
            if not self._due:
                return
            self._due = False
            self._arrived = False
            self._arrival.clear()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="context-paging-idle",
                                                daemon=True)
                self._thread.start()
        self._wake.set()

    # --- the idle thread ----------------------------------------------------------------------

    def _waited_on(self) -> bool:
        # Plain reads: atomic; a stale answer costs one count.
        return self._waiting > 0 or self._arrived

    def _loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._arrival.wait(self._delay):
                continue  # the host is busy sending: not spare time after all
            if self._waited_on() or not self._lock.acquire(blocking=False):
                continue  # a call is running or waiting: the next reply kicks again
            try:
                self.runs += 1
                self._work(self._seconds, self._waited_on)
            except Exception:  # spare work must never take the server down
                log.exception("idle work failed")
            finally:
                self._lock.release()
