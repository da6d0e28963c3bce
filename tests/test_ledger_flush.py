"""select_context answers only once the ledger lines it wrote are on disk (the hot path runs the
fsync in the background while it selects; the guarantee must stay what it was)."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest
from context_paging.index.ledger import Ledger
from context_paging.index.window.pipeline import ContextService, ContextSettings
from context_paging.paging.limits import ContextSelectionError


def conversation(turns: int) -> list[dict]:
    out: list[dict] = []
    for n in range(turns):
        out += [{"role": "user", "content": f"request {n} " + "word " * 50},
                {"role": "assistant", "stopReason": "stop",
                 "content": [{"type": "text", "text": f"answer {n} " + "word " * 50}]}]
    return out


class SlowDisk:
    """os.fsync stand-in: slow, and remembers which descriptors' files were flushed when."""

    def __init__(self, delay: float, fail: bool = False) -> None:
        self.delay, self.fail = delay, fail
        self.done: list[tuple[int, float]] = []  # (inode, when)
        self.lock = threading.Lock()
        self.real = os.fsync

    def __call__(self, fd: int) -> None:
        time.sleep(self.delay)
        if self.fail:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.real(fd)
        with self.lock:
            self.done.append((os.fstat(fd).st_ino, time.perf_counter()))


def service(home: Path) -> ContextService:
    return ContextService(Ledger(home), ContextSettings(token_budget=400), None)


def test_reply_comes_after_the_flush(tmp_path, monkeypatch) -> None:
    disk = SlowDisk(0.05)
    monkeypatch.setattr(os, "fsync", disk)
    svc = service(tmp_path)
    reply = svc.select("s", conversation(6), fmt="pi")
    answered = time.perf_counter()
    inode = (tmp_path / "ledger" / "s.jsonl").stat().st_ino
    assert [t for i, t in disk.done if i == inode], "the ledger was never flushed"
    assert all(t <= answered for _, t in disk.done)
    # the next call, sending only what is new, is flushed before it answers as well
    more = conversation(7)[-2:]
    before = len(disk.done)
    svc.select("s", more, fmt="pi", after_id=reply["last_message_id"])
    assert len(disk.done) > before


def test_an_error_reply_also_waits_for_the_flush(tmp_path, monkeypatch) -> None:
    """The ledger is written before selection, so a selection error never loses history: the
    error too is raised only once the lines are on disk."""
    disk = SlowDisk(0.05)
    monkeypatch.setattr(os, "fsync", disk)
    svc = service(tmp_path)
    with pytest.raises(ContextSelectionError):
        svc.select("s", conversation(3), fmt="pi", token_budget=-5)
    assert disk.done, "raised before the appended lines were flushed"
    assert len(Ledger(tmp_path).session("ledger:s").records) == 6


def test_a_failed_flush_is_a_storage_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(os, "fsync", SlowDisk(0.0, fail=True))
    with pytest.raises(OSError) as caught:
        service(tmp_path).select("s", conversation(3), fmt="pi")
    assert caught.value.errno == errno.ENOSPC
