"""What ``install-proxy`` changed in an agent's file, kept so ``uninstall-proxy`` can undo it.

Beside each file it writes, install-proxy keeps ``<file>.context-paging-undo`` (0600: the
original may hold keys): the file's original text (or that there was none) and a hash of the
text install-proxy wrote last. The original is recorded once, by the first run, and never
replaced, so a second run (another ``--port``) cannot lose it.

``uninstall-proxy`` puts back the original byte for byte when the file is still exactly what
install-proxy wrote (a missing original: the file is removed). When something else changed the
file since (Claude Code rewrites ``~/.claude.json`` all the time), only install-proxy's own keys
go back to their original values (or away), and the rest of the file stays as it is now.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from context_paging.server.setup import clients

SUFFIX = ".context-paging-undo"
# (the file as it is now, its original or None) -> the file without install-proxy's keys,
# or None for no file at all
Reverse = Callable[[str, str | None], str | None]


def record_path(path: Path) -> Path:
    return path.with_name(path.name + SUFFIX)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def load(path: Path) -> dict[str, Any] | None:
    text = _read(record_path(path))
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not (isinstance(value, dict) and "original" in value):
        raise clients.InstallError(f"{record_path(path)} is damaged; nothing was changed. "
                                   "Compare it with the file by hand, then delete it")
    return value


def write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, recording the original first if this is the first
    change install-proxy makes to it."""
    record = load(path)
    if record is None:
        record = {"original": _read(path)}
    record["installed"] = _digest(text)
    _save(record_path(path), json.dumps(record, ensure_ascii=False))
    clients._replace(path, text, backup=False)


def undo(path: Path, reverse: Reverse) -> str:
    """Take install-proxy's change to ``path`` back; a sentence saying what was done."""
    record = load(path)
    if record is None:
        return f"{path}: not changed by install-proxy; left as it is."
    original, current = record["original"], _read(path)
    if current is None or _digest(current) == record.get("installed"):
        restored, how = original, "restored byte for byte"
    else:
        restored, how = reverse(current, original), ("changed since: only install-proxy's "
                                                     "settings were taken back")
    if restored is None:
        path.unlink(missing_ok=True)
        how = "removed (install-proxy had created it)"
    elif restored != current:
        clients._replace(path, restored, backup=False)
    record_path(path).unlink()
    return f"{path}: {how}."


def _save(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


# --- taking keys back ---------------------------------------------------------------------------


def json_keys(*paths: tuple[str, ...]) -> Reverse:
    """A reverse for a JSON file where install-proxy set the values at ``paths``."""

    def reverse(current: str, original: str | None) -> str | None:
        value = json.loads(current)
        before = json.loads(original) if original and original.strip() else {}
        for path in paths:
            _put_back(value, before, path)
        if not value and original is None:
            return None
        return json.dumps(value, indent=2, ensure_ascii=False) + "\n"

    return reverse


_MISSING = object()


def _put_back(value: dict[str, Any], before: Any, path: tuple[str, ...]) -> None:
    old: Any = before
    for key in path:
        old = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
    parents = [value]
    for key in path[:-1]:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return  # the user removed the table meanwhile
        parents.append(child)
    if old is _MISSING:
        parents[-1].pop(path[-1], None)
        for depth in range(len(path) - 1, 0, -1):  # tables install-proxy made, left empty
            if parents[depth] or _exists(before, path[:depth]):
                break
            parents[depth - 1].pop(path[depth - 1], None)
    else:
        parents[-1][path[-1]] = old


def _exists(value: Any, path: tuple[str, ...]) -> bool:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True
