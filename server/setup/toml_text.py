"""TOML edited as text: set one top-level line or one table and leave every other byte alone.

Codex's ``config.toml`` is the user's own file, comments and order included, so set-up never
re-serialises it: only the named line or table is replaced (or added), and each caller parses
the result before writing it.
"""

from __future__ import annotations

import json
import re


def toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string


def table_pattern(name: str) -> re.Pattern[str]:
    """The ``[name]`` table: its header up to the next header or the end."""
    return re.compile(rf"^\[{re.escape(name)}\]\s*$.*?(?=^\s*\[|\Z)", re.M | re.S)


def top_level_pattern(key: str) -> re.Pattern[str]:
    return re.compile(rf"^[ \t]*{re.escape(key)}[ \t]*=.*$\n?", re.M)  # never a blank line


def set_top_level(text: str, key: str, line: str) -> str:
    """Replace ``key = …`` before the first table header, or insert ``line`` at the top."""
    header = re.search(r"^\s*\[", text, re.M)
    top, rest = (text[:header.start()], text[header.start():]) if header else (text, "")
    pattern = re.compile(rf"^[ \t]*{re.escape(key)}[ \t]*=.*$", re.M)
    if pattern.search(top):
        top = pattern.sub(line, top, count=1)
    else:
        top = line + "\n" + top
    return top + rest


def line_key(line: str) -> str | None:
    """The key a ``key = value`` line sets (None for a comment, a blank or anything else)."""
    found = re.match(r"[ \t]*([A-Za-z0-9_-]+)[ \t]*=", line)
    return found.group(1) if found else None


def set_table(text: str, name: str, body: str) -> str:
    """Set the ``[name]`` table to ``body``: its lines replace the lines of the same keys, the
    table's other lines (comments, other keys, the blank lines after it) stay after them, so
    setting the same table twice changes nothing. A missing table is appended after a blank
    line."""
    table = f"[{name}]\n{body}\n"
    found = table_pattern(name).search(text)
    if not found:
        return text.rstrip("\n") + ("\n\n" if text.strip() else "") + table
    keys = {line_key(line) for line in body.splitlines()}
    lines = found.group(0).splitlines(keepends=True)
    others = [line for line in lines[1:] if line_key(line) not in keys]
    return text[:found.start()] + table + "".join(others) + text[found.end():]
