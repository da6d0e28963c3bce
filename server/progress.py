"""Progress of long CLI commands on stderr, so a command is never silent for more than 2 s.

On a terminal it is one redrawn bar (or a phase message with a spinner when the amount of work
is unknown); otherwise plain lines: a phase and the first count after it at once, then at most
one line every 2 s, and the end. A command that is usually quick (a search) reports nothing in
its first 0.75 s. A ticker
thread repeats the current state with the seconds elapsed whenever nothing else was written for
a while, which covers the steps that report nothing themselves (an index commit, a session
being parsed). stdout is never written, so ``--json`` output stays clean; ``--quiet`` turns it
all off (:func:`progress_for`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

QUIET_LIMIT = 2.0  # seconds without a word, at most
PATIENCE = 0.75  # seconds a patient reporter keeps quiet at first
BAR_WIDTH = 30
SPINNER = "|/-\\"


class Progress:
    """A ``(done, total, message)`` callback (the shape ``index.service`` reports with) that
    draws on stderr. ``total`` None (or 0) means the amount of work is unknown: a phase."""

    def __init__(self, stream: TextIO | None = None, tty: bool | None = None,
                 clock: Callable[[], float] = time.monotonic, every: float = QUIET_LIMIT,
                 patient: bool = False):
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.every = every
        # Patient: say nothing in the first 0.75 s, for a command that is usually quick (a
        # search) and only sometimes long (the first one, which reads and indexes a session).
        self.patient = patient
        self.started = clock()
        self.last_written: float | None = None
        self.state: tuple[float, float | None, str] | None = None
        self.drawn = False  # a bar is on the terminal's current line
        self.turns = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # --- what callers report ----------------------------------------------------------------

    def __call__(self, done: float, total: float | None, message: str) -> None:
        with self._lock:
            # A phase, and the first count after one, is said at once; then plain lines come
            # at most every 2 s, a bar at most ten times a second, and the end always.
            first = self.state is None or not total or self.state[1] != total
            self.state = (done, total, message)
            now = self.clock()
            finished = bool(total) and done >= total
            limit = 0.1 if self.tty else self.every
            if self._waiting(now):
                return
            if first or finished or self._quiet_for(now) >= limit:
                self._write(now)

    def phase(self, message: str) -> None:
        """Work of unknown size begins (reading a session, committing the index)."""
        self(0, None, message)

    def emit(self, text: str) -> None:
        """Print ``text`` on stdout without tearing a bar drawn on the terminal (a CLI
        command's own output: ``serve`` never makes a Progress)."""
        with self._lock:
            self._clear()
            _stdout(text)
            self.last_written = self.clock()

    def tick(self) -> None:
        """Repeat the current state if nothing was written for a while (the ticker's step)."""
        with self._lock:
            now = self.clock()
            limit = 0.25 if self.tty else self.every - 0.5  # the ticker wakes every 0.25 s
            held = self.last_written is None  # a patient reporter's first line is due
            if self.state is not None and not self._waiting(now) and (
                    held or self._quiet_for(now) >= limit):
                self._write(now)

    # --- lifetime ---------------------------------------------------------------------------

    def __enter__(self) -> Progress:
        self._ticker = threading.Thread(target=self._run, name="progress", daemon=True)
        self._ticker.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join(timeout=1)
        with self._lock:
            self._clear()

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.tick()

    # --- drawing ----------------------------------------------------------------------------

    def _waiting(self, now: float) -> bool:
        return self.patient and now - self.started < PATIENCE

    def _quiet_for(self, now: float) -> float:
        return now - (self.last_written if self.last_written is not None else self.started)

    def _write(self, now: float) -> None:
        assert self.state is not None
        spin = SPINNER[self.turns % 4] if self.tty else ""
        line = render(*self.state, seconds=now - self.started, spin=spin)
        self.turns += 1
        if self.tty:
            self.stream.write(f"\r{line[:118]:<118}")
            self.drawn = True
        else:
            self.stream.write(f"context-paging: {line}\n")
        self.stream.flush()
        self.last_written = now

    def _clear(self) -> None:
        if self.tty and self.drawn:
            self.stream.write("\r" + " " * 118 + "\r")
            self.stream.flush()
            self.drawn = False


def render(done: float, total: float | None, message: str, seconds: float,
           spin: str = "") -> str:
    """One progress line: a bar and a count when the total is known, else the phase."""
    elapsed = f"({seconds:.0f} s)"
    if not total:
        return f"{spin + ' ' if spin else ''}{message} {elapsed}"
    filled = min(BAR_WIDTH, int(BAR_WIDTH * done / total))
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    return f"[{bar}] {int(done)}/{int(total)} {message} {elapsed}"


class Silent:
    """The same calls as :class:`Progress`, drawing nothing (``--quiet``)."""

    def __call__(self, done: float, total: float | None, message: str) -> None:
        pass

    def phase(self, message: str) -> None:
        pass

    def emit(self, text: str) -> None:
        _stdout(text)

    def __enter__(self) -> Silent:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def progress_for(args: object, patient: bool = False) -> Progress | Silent:
    """The reporter a command's ``--quiet`` flag asks for."""
    return Silent() if getattr(args, "quiet", False) else Progress(patient=patient)


def add_quiet(parser) -> None:
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="no progress on stderr (it is on by default for long work)")


def _stdout(text: str) -> None:
    """One line of a CLI command's own output on stdout, flushed at once."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
