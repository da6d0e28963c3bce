"""Two server processes on one home: both index and search, nothing is lost; and one
conversation's work does not wait for another's."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from context_paging.index import ledger as ledger_module
from context_paging.index.discovery import iter_session_files
from context_paging.index.ledger import Ledger
from context_paging.index.service import History

from tests.test_protocol import lay_out, write_config


def test_two_processes_indexing_one_home_at_once_lose_no_items(tmp_path):
    roots = lay_out(tmp_path)
    home = tmp_path / "home"
    write_config(home, roots)
    env = {**os.environ, "CONTEXT_PAGING_HOME": str(home)}
    command = [sys.executable, "-m", "context_paging", "index", "--all"]
    runs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=240) for run in runs]
    for run, (_, stderr) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, stderr
        assert "Traceback" not in stderr
    history = History(roots, home)
    try:
        for found in iter_session_files(roots):
            items = history.navigator(found.ref).raw
            assert len(history.store.documents(found.ref)) == len(items), found.ref
            assert history.ensure_indexed(found.ref) is None  # both runs left it complete
    finally:
        history.close()


def test_one_conversations_flush_to_disk_never_waits_for_anothers(tmp_path, monkeypatch):
    """Each call waits for its own session's background fsync before it answers; a slow flush
    of one conversation must not hold up another's (the proxy pages many at once)."""
    ledger = Ledger(tmp_path)
    slow, other = ledger.session("ledger:slow"), ledger.session("ledger:other")
    slow.append([{"role": "user", "content": "first"}], ["m1"], "pi")  # the file exists
    stuck = os.stat(slow.path).st_ino
    blocked, release = threading.Event(), threading.Event()
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.fstat(fd).st_ino == stuck:
            blocked.set()
            release.wait(60)
        real(fd)

    monkeypatch.setattr(ledger_module.os, "fsync", fsync)
    try:
        slow.append([{"role": "user", "content": "second"}], ["m2"], "pi", durable=False)
        assert blocked.wait(30)  # the slow conversation's flush is under way, and stuck
        other.append([{"role": "user", "content": "hello"}], ["n1"], "pi", durable=False)
        done = threading.Event()
        waiter = threading.Thread(target=lambda: (other.synced(), done.set()), daemon=True)
        waiter.start()
        assert done.wait(30), "the other conversation waited for the slow one's flush"
    finally:
        release.set()
    slow.synced()
    assert [r["message"]["content"] for r in slow.records.values()] == ["first", "second"]
