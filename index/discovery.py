"""Where session files live, and which file a session reference names.

A *session reference* (docs/sessions.md, "Session references") is ``<source>:<id>`` (``pi``,
``claude``, ``codex``; ``ledger`` is resolved by the ledger), a bare id that matches exactly one
session (a unique prefix of at least 6 characters also works), or a path to a file inside a
configured source root. Anything that resolves outside the roots is refused, symlinks included.

Ids come from file names first, so resolving a reference does not parse any file:

* Pi: ``<timestamp>_<session id>.jsonl`` → the part after the last ``_``;
* Claude Code: ``<session id>.jsonl`` and ``<session>/subagents/agent-<id>.jsonl`` → the stem;
* Codex: ``rollout-<local time>-<thread uuid>.jsonl`` → the trailing uuid;
* Gemini CLI: ``<project>/chats/session-<local time>-<first 8 of the id>.jsonl`` → those 8;
* OpenCode: no file per session: every session in the root's ``opencode.db`` is named by its
  own id (``ses_…``), and its path is the database.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

_UUID_TAIL = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$", re.I)
SOURCE_NAMES = ("pi", "claude", "codex", "gemini", "opencode")
_PATTERNS = {"codex": "rollout-*.jsonl", "gemini": "session-*.jsonl"}
MIN_PREFIX = 6


class SessionRefError(ValueError):
    """A session reference that names no session, several, or a place outside the roots."""

    code = "UNKNOWN_SESSION"


class InvalidSessionRef(SessionRefError):
    """A session reference that is malformed whatever the roots hold (a NUL byte, '..'): the
    same cause as a malformed ledger id, so the same code (INVALID_SESSION)."""

    code = "INVALID_SESSION"


@dataclass(frozen=True, slots=True)
class SessionFileRef:
    source: str
    session_id: str
    path: Path

    @property
    def ref(self) -> str:
        return f"{self.source}:{self.session_id}"


def name_id(source: str, path: Path) -> str:
    """The session id a file's name carries (the stem when the name has none)."""
    stem = path.name.removesuffix(".jsonl")
    if source == "pi" and "_" in stem:
        return stem.rsplit("_", 1)[1]
    if source == "codex":
        match = _UUID_TAIL.search(stem)
        if match:
            return match.group(1)
    if source == "gemini":
        from context_paging.index.sources.gemini import name_id as gemini_id

        return gemini_id(str(path))
    return stem


def iter_session_files(roots: Mapping[str, Path | None]) -> Iterator[SessionFileRef]:
    """Every session file under the configured roots; missing roots are fine."""
    for source in SOURCE_NAMES:
        root = roots.get(source)
        if root is None or not root.is_dir():
            continue
        if source == "opencode":
            yield from _database_sessions(root)
            continue
        for path in sorted(root.rglob(_PATTERNS.get(source, "*.jsonl"))):
            if path.is_file() and _inside(path, root):
                yield SessionFileRef(source, name_id(source, path), path)


def _database_sessions(root: Path) -> Iterator[SessionFileRef]:
    """OpenCode's sessions: the rows of the one database in its data folder."""
    from context_paging.index.sources.opencode import DATABASE, session_ids

    path = root / DATABASE
    if path.is_file() and _inside(path, root):
        for ident in session_ids(str(path), str(root)):
            yield SessionFileRef("opencode", ident, path)


def _inside(path: Path, root: Path) -> bool:
    try:
        return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root))
    except (OSError, ValueError):
        return False


def resolve(ref: str, roots: Mapping[str, Path | None]) -> SessionFileRef:
    """The one session file a reference names, or a SessionRefError saying why not."""
    if not isinstance(ref, str) or not ref.strip():
        raise InvalidSessionRef("session reference is empty; list sessions to get one")
    if "\x00" in ref:
        raise InvalidSessionRef("session reference contains a NUL byte")
    ref = ref.strip()
    source, _, ident = ref.partition(":")
    if source in SOURCE_NAMES and ".." in Path(ident).parts:
        raise InvalidSessionRef(f"session reference {ref!r} may not contain '..'")
    if source in SOURCE_NAMES and ident and "/" not in ident:
        return _by_id(ident, roots, source)
    if "/" in ref or "\\" in ref or ref.endswith(".jsonl"):
        return _by_path(ref, roots)
    return _by_id(ref, roots, None)


def _by_id(ident: str, roots: Mapping[str, Path | None], source: str | None) -> SessionFileRef:
    candidates = [
        found
        for found in iter_session_files(roots)
        if source in (None, found.source)
    ]
    exact = [f for f in candidates if ident in (f.session_id, f.path.name.removesuffix(".jsonl"))]
    prefixed = [f for f in candidates if f.session_id.startswith(ident)]
    matches = exact or (prefixed if len(ident) >= MIN_PREFIX else [])
    label = f"{source}:{ident}" if source else ident
    if not matches and prefixed:
        raise SessionRefError(
            f"{label!r} is too short: a session id prefix needs at least {MIN_PREFIX} "
            f"characters ({len(prefixed)} session(s) start with it, e.g. {prefixed[0].ref})"
        )
    if not matches:
        raise SessionRefError(
            f"no session matches {label!r}; list sessions (the list_sessions tool or "
            "`context-paging sessions`) for valid references"
        )
    if len(matches) > 1:
        names = ", ".join(m.ref for m in matches[:5])
        raise SessionRefError(
            f"{label!r} matches {len(matches)} sessions ({names}); give the full id"
        )
    return matches[0]


def _by_path(text: str, roots: Mapping[str, Path | None]) -> SessionFileRef:
    path = Path(os.path.expanduser(text))
    if ".." in path.parts:
        raise InvalidSessionRef(f"session path {text!r} may not contain '..'")
    real = Path(os.path.realpath(path))
    for source in SOURCE_NAMES:
        root = roots.get(source)
        if root is None:
            continue
        if real.is_relative_to(os.path.realpath(root)):
            if source == "opencode":
                raise SessionRefError(f"{text!r} holds every OpenCode session; name one as "
                                      "opencode:<id> (list sessions for the ids)")
            if not real.is_file():
                raise SessionRefError(f"no session file at {text!r}")
            return SessionFileRef(source, name_id(source, real), real)
    raise SessionRefError(
        f"session path {text!r} is outside the configured session roots; "
        "only files under the [sources] directories can be read"
    )
