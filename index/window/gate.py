"""Who may run a ``select_context`` call now: one call per session at a time, calls of
different sessions at once, and spare-time work only while no call runs or waits.

The proxy pages every conversation the agents on a machine run; a 25 MB request of one must not
hold up another's small one. Each session's calls are serialized (its ledger, cut and stored
decisions are read and written by the call), while what sessions share (the caches, the ledger's
table of open sessions, the fingerprint memo) takes a short lock of its own where it changes.
Spare-time work (``ContextService.idle``, counting ahead from the last call's request) reads the
shared caches at length, so it takes the gate whole, and only when nothing else holds it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Gate:
    def __init__(self) -> None:
        self._state = threading.Condition()
        self._sessions: dict[str, tuple[threading.Lock, int]] = {}  # lock, calls holding it
        self._calls = 0  # calls running or waiting for their session
        self._spare = False  # spare-time work holds the gate

    @contextmanager
    def session(self, name: str) -> Iterator[None]:
        """Run a call of ``name``: after the session's earlier calls, beside other sessions'."""
        with self._state:
            while self._spare:
                self._state.wait()
            lock, users = self._sessions.get(name, (None, 0))
            lock = lock or threading.Lock()
            self._sessions[name] = (lock, users + 1)
            self._calls += 1
        try:
            with lock:
                yield
        finally:
            with self._state:
                lock, users = self._sessions[name]
                if users == 1:
                    del self._sessions[name]
                else:
                    self._sessions[name] = (lock, users - 1)
                self._calls -= 1
                self._state.notify_all()

    def acquire(self, blocking: bool = False) -> bool:
        """Take the gate for spare-time work: only when no call runs or waits (never blocks)."""
        with self._state:
            if self._calls or self._spare:
                return False
            self._spare = True
            return True

    def release(self) -> None:
        with self._state:
            self._spare = False
            self._state.notify_all()
