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
    return re.compile(rf"^\s*{re.escape(key)}\s*=.*$\n?", re.M)


def set_top_level(text: str, key: str, line: str) -> str:
    """Replace ``key = …`` before the first table header, or insert ``line`` at the top."""
    header = re.search(r"^\s*\[", text, re.M)
    top, rest = (text[:header.start()], text[header.start():]) if header else (text, "")
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=.*$", re.M)
    if pattern.search(top):
        top = pattern.sub(line, top, count=1)
    else:
        top = line + "\n" + top
    return top + rest


def set_table(text: str, name: str, body: str) -> str:
    """Replace the ``[name]`` table (up to the next header, keeping the blank lines before it)
    or append it after a blank line: setting the same table twice changes nothing."""
    table = f"[{name}]\n{body}\n"
    found = table_pattern(name).search(text)
    if found:
        old = found.group(0)
        gap = old[len(old.rstrip("\n")):]
        return text[:found.start()] + table.rstrip("\n") + gap + text[found.end():]
    return text.rstrip("\n") + ("\n\n" if text.strip() else "") + table
