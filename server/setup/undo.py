"""What set-up changed in a file, kept so it can be taken back: ``install-proxy`` /
``uninstall-proxy`` and ``install-config`` / ``uninstall-config``.

Beside each file it writes, set-up keeps ``<file>.context-paging-undo`` (0600: the original may
hold keys), one record for both commands:

- ``original``: the file before set-up changed it (``None``: there was no file);
- ``installed``: a hash of the text set-up wrote last;
- ``owners``: per command, the keys it set, as paths (below);
- ``edited``: whether ``original`` was rebuilt because the file changed since set-up's last
  write.

Writing again is idempotent: the same text is not written twice. When the file is still what
set-up wrote last, the original stays as it was; when something else changed it since (the user,
or Claude Code, which rewrites ``~/.claude.json`` all the time), the original becomes that file
with set-up's keys taken back, so the edits made since survive an uninstall.

Taking back is a reverse edit of only the command's own keys: each goes back to its original
value, or away, and everything else in the file stays as it is now. Only when the file is still
what set-up wrote and its original was never rebuilt is the original put back instead, byte for
byte (a missing original: the file is removed), and only then is it reported so. A key another
command also set (the MCP entry both install commands write) stays until that command is
undone too.

A key is a path of names. In JSON it is the path of object keys; a path whose last name is
held by an array names an entry of that array (Claude Code's ``permissions.allow`` rules), which
taking back removes unless the original array had it. In TOML (edited as text, see
server/setup/toml_text.py) a path of one name is a line before the first table, and a longer one
is the line ``last = …`` of the table ``[the.names.before]``; lines set-up did not write, comments
and appended lines included, are kept. In a ``.env`` file (Gemini CLI's) a key of one name is the
line ``NAME=value`` (``export NAME=value`` too): taking it back puts the original's line for that
name in its place, or removes it; every other line stays. A file with no keys is set-up's own
(the user service): taking it back gives the original.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from context_paging.server.setup.toml_text import (
    line_key,
    set_top_level,
    table_pattern,
    top_level_pattern,
)

SUFFIX = ".context-paging-undo"
Key = tuple[str, ...]


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
    """The record kept for ``path``, or None; ValueError when it cannot be read."""
    text = _read(record_path(path))
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not (isinstance(value, dict) and "original" in value):
        raise ValueError(f"{record_path(path)} is damaged; nothing was changed. "
                         "Compare it with the file by hand, then delete it")
    return value


def _owners(record: dict[str, Any], owner: str, keys: list[Key]) -> dict[str, list[Key]]:
    found = record.get("owners")
    if not isinstance(found, dict):  # a record from before owners were kept: install-proxy's
        return {owner: list(keys)} if owner == "install-proxy" else {}
    return {name: [tuple(key) for key in value] for name, value in found.items()}


def write(path: Path, text: str, owner: str, keys: list[Key]) -> bool:
    """Write ``text`` to ``path`` atomically for ``owner`` (the command) that sets ``keys``,
    keeping the original first; False when the file already holds ``text``."""
    current = _read(path)
    if current == text:
        return False
    record = load(path)
    if record is None:
        record = {"original": current, "edited": False}
    owners = _owners(record, owner, keys)
    _catch_up(path, record, owners, current)
    owners[owner] = list(dict.fromkeys([*owners.get(owner, []), *keys]))
    record.update(installed=_digest(text), owners=owners)
    _save(record_path(path), json.dumps(record, ensure_ascii=False))
    replace(path, text)
    return True


def _catch_up(path: Path, record: dict[str, Any], owners: dict[str, list[Key]],
              current: str | None) -> None:
    """When ``path`` changed since set-up last wrote it, make its original that file without
    set-up's keys, so the change outlives an uninstall."""
    if record.get("installed") is None or (
            current is not None and _digest(current) == record["installed"]):
        return
    everything = [key for value in owners.values() for key in value]
    record["original"] = (None if current is None else
                          take_back(path, current, record["original"], everything))
    record["edited"] = True


def undo(path: Path, owner: str, keys: list[Key], apply: bool = True) -> str:
    """Take ``owner``'s change to ``path`` back (``apply=False``: only say what would be done);
    a sentence saying what was done."""
    record = load(path)
    owners = _owners(record, owner, keys) if record else {}
    if owner not in owners:
        return f"{path}: not changed by {owner}; left as it is."
    current = _read(path)
    if len(owners) > 1:  # another command's keys stay, and so does the record
        _catch_up(path, record, owners, current)
    mine = owners.pop(owner)
    shared = {key for value in owners.values() for key in value}
    original = record["original"]
    if owners:
        ours = [key for key in mine if key not in shared]
        restored = current if current is None or not ours else take_back(
            path, current, original, ours)
        how = (f"only {owner}'s settings were taken back" if restored != current else
               f"kept: {', '.join(sorted(owners))} set the same up")
    elif current is not None and _digest(current) == record.get("installed") \
            and not record.get("edited"):
        restored, how = original, "restored byte for byte"
    elif current is None:
        restored = original
        how = "deleted since; its original restored" if original is not None else "already gone"
    else:
        restored = take_back(path, current, original, mine)
        how = f"changed since: only {owner}'s settings were taken back"
    if restored is None and current is not None:
        how = f"removed ({owner} had created it)"
    if not apply:
        return f"{path}: with --write, {how}."
    if restored is None:
        path.unlink(missing_ok=True)
    elif restored != current:
        replace(path, restored)
    if owners:
        record.update(owners=owners, installed=None if restored is None else _digest(restored))
        _save(record_path(path), json.dumps(record, ensure_ascii=False))
    else:
        record_path(path).unlink()
    return f"{path}: {how}."


def replace(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, keeping its mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(
        "w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
        delete=False,
    )
    try:
        with handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if path.exists():
            shutil.copymode(path, handle.name)
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def _save(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0),
                 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


# --- taking keys back ---------------------------------------------------------------------------


def take_back(path: Path, current: str, original: str | None, keys: list[Key]) -> str | None:
    """``current`` with each of ``keys`` as ``original`` had it (or away); None for no file.
    ValueError when the result would not parse."""
    if not keys:
        return original
    if path.suffix == ".toml":
        return _toml_back(current, original, keys)
    if path.name == ".env" or path.suffix == ".env":
        return _env_back(current, original, keys)
    return _json_back(current, original, keys)


def _json_back(current: str, original: str | None, keys: list[Key]) -> str | None:
    value = json.loads(current) if current.strip() else {}
    before = json.loads(original) if original and original.strip() else {}
    if not isinstance(value, dict):
        raise ValueError("it does not hold a JSON object")
    for key in keys:
        _put_back(value, before, key)
    if not value and original is None:
        return None
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


_MISSING = object()


def _put_back(value: dict[str, Any], before: Any, path: Key) -> None:
    holder, was = _at(value, path[:-1]), _at(before, path[:-1])
    if isinstance(holder, list):  # an entry of an array
        if not (isinstance(was, list) and path[-1] in was):
            holder[:] = [entry for entry in holder if entry != path[-1]]
            if not holder and was is _MISSING:  # an array set-up made, left empty
                _put_back(value, before, path[:-1])
        return
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
        for depth in range(len(path) - 1, 0, -1):  # tables set-up made, left empty
            if parents[depth] or _exists(before, path[:depth]):
                break
            parents[depth - 1].pop(path[depth - 1], None)
    else:
        parents[-1][path[-1]] = old


def _at(value: Any, path: Key) -> Any:
    for key in path:
        value = value.get(key, _MISSING) if isinstance(value, dict) else _MISSING
    return value


def _exists(value: Any, path: Key) -> bool:
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return False
        value = value[key]
    return True


def _toml_back(current: str, original: str | None, keys: list[Key]) -> str:
    before = original or ""
    header = re.search(r"^\s*\[", before, re.M)
    top = before[:header.start()] if header else before
    text = current
    tables: dict[str, set[str]] = {}
    for key in keys:
        if len(key) > 1:
            tables.setdefault(".".join(key[:-1]), set()).add(key[-1])
            continue
        line = top_level_pattern(key[0]).search(top)
        if line:
            text = set_top_level(text, key[0], line.group(0).rstrip("\n"))
        else:
            split = re.search(r"^\s*\[", text, re.M)
            head, rest = (text[:split.start()], text[split.start():]) if split else (text, "")
            text = top_level_pattern(key[0]).sub("", head, count=1) + rest
    for name, owned in tables.items():
        text = _table_back(text, before, name, owned)
    tomllib.loads(text)
    return text


def _table_back(text: str, before: str, name: str, owned: set[str]) -> str:
    """``[name]`` without the lines set-up wrote: the original's table back in its place, or the
    header and set-up's lines away (with the blank line set-up put before it); every other line
    stays."""
    found = table_pattern(name).search(text)
    if not found:
        return text
    lines = found.group(0).splitlines(keepends=True)
    others = [line for line in lines[1:] if line_key(line) not in owned]
    was = table_pattern(name).search(before)
    head, rest = text[:found.start()], text[found.end():]
    if was:
        table = was.group(0)
        added = [line for line in others if line.strip() and line not in table.splitlines(True)]
        body = table.rstrip("\n") + "\n" + "".join(added) if added else table
        return head + body + ("" if body.endswith("\n") or not rest else "\n") + rest
    if head.endswith("\n\n") or head == "\n":  # the blank line set_table put before it
        head = head[:-1]
    return head + "".join(others) + rest


def env_pattern(name: str) -> re.Pattern[str]:
    """The line of a ``.env`` file that sets ``name``, its line end included."""
    return re.compile(rf"^[ \t]*(?:export[ \t]+)?{re.escape(name)}[ \t]*=.*(?:\n|$)", re.M)


def set_env_line(text: str, name: str, line: str) -> str:
    """``text`` with ``line`` as the line setting ``name``: in place of the first one, or
    appended; every other line kept."""
    found = env_pattern(name).search(text)
    if found:
        end = "\n" if found.group(0).endswith("\n") else ""
        return text[:found.start()] + line + end + text[found.end():]
    return text + ("" if not text or text.endswith("\n") else "\n") + line + "\n"


def _env_back(current: str, original: str | None, keys: list[Key]) -> str | None:
    text = current
    for key in keys:
        pattern = env_pattern(key[-1])
        before = pattern.search(original or "")
        if before:
            text = set_env_line(text, key[-1], before.group(0).rstrip("\n"))
        else:
            text = pattern.sub("", text, count=1)
    return None if original is None and not text.strip() else text
