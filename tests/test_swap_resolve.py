"""A session link swapped away while a path is being resolved is the session's problem.

CPython's non-strict ``os.path.realpath`` (3.11) ``lstat``s each name and, when it is a link,
``readlink``s it; a link replaced by a regular file in between makes that ``readlink`` raise
EINVAL (ENOENT when it is removed), which ``realpath`` does not catch. The symlink-swap race of
test_hardening (the symlink swap) hit this once under load inside the error handler of
``index.service._unreadable_session``: the handler resolves the failing file to decide whether
it lies in the home, its own ``realpath`` raised, and the new ``OSError`` reached the server as
``STORAGE_ERROR`` blaming the home. Here the interleaving is made certain: every ``readlink`` of
the session file finds the link just swapped for the inside file, and the link is put back
before the next ``lstat``.

The last test is a neighbour of the same kind: a session file that changes between a listing
and a look at it is the session's problem, never a storage error.
"""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
from context_paging.index.discovery import SessionRefError
from context_paging.index.service import _unreadable_session
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

from tests.test_hardening import agent_roots, claude_lines
from tests.test_protocol import call

pytestmark = pytest.mark.anyio

ALLOWED = ("UNKNOWN_SESSION: ", "UNKNOWN_HISTORY_ID: ", "UNKNOWN_TOOL_CALL_ID: ")


def swapping_readlink(session: Path, keep: Path, outside: Path, monkeypatch) -> list[str]:
    """Patch ``os.readlink`` so that reading the session link always loses the race: the link
    becomes the inside file just before the read (EINVAL) and a link again right after."""
    real_readlink = os.readlink
    lost: list[str] = []

    def readlink(path, *args, **kwargs):
        if os.fspath(path) != str(session):
            return real_readlink(path, *args, **kwargs)
        hard, link = str(session) + ".hard", str(session) + ".lnk"
        os.link(keep, hard)
        os.replace(hard, session)  # the inside file, between realpath's lstat and readlink
        try:
            return real_readlink(path, *args, **kwargs)
        except OSError as exc:
            lost.append(errno.errorcode.get(exc.errno, str(exc.errno)))
            raise
        finally:
            os.symlink(outside, link)
            os.replace(link, session)  # the link to the outside file again

    monkeypatch.setattr(os, "readlink", readlink)
    return lost


async def test_a_link_swapped_away_while_resolving_is_an_unknown_session(tmp_path, monkeypatch):
    roots, home = agent_roots(tmp_path)
    session = roots["claude"] / "-work-c" / "race.jsonl"
    session.parent.mkdir()
    session.write_text(claude_lines("race", "insideword"))
    keep = tmp_path / "keep.jsonl"
    os.link(session, keep)
    outside = tmp_path / "outside.jsonl"
    outside.write_text(claude_lines("race", "outsideword"))
    by_path, by_id = str(session), "claude:race"
    requests = [
        ("recall", {"tool_call_id": "toolu_1", "session": by_path}),
        ("search_history", {"query": "answer", "session": by_path, "load": True}),
        ("browse_history", {"direction": "forward", "count": 10, "session": by_path}),
        ("load_history", {"history_ids": ["insideword0001"], "session": by_path}),
        # By id, once remembered: the roots check of the remembered file resolves it.
        ("recall", {"tool_call_id": "toolu_1", "session": by_id}),
        ("search_history", {"query": "answer", "session": by_id, "load": True}),
        ("browse_history", {"direction": "forward", "count": 10, "session": by_id}),
        ("load_history", {"history_ids": ["insideword0001"], "session": by_id}),
    ]
    server = create_server(load_settings(home=home))
    try:
        async with Client(server) as client:
            error, text, _ = await call(client, *requests[4])  # remembers claude:race
            assert (error, text) == (False, "insideword out 1")
            session.unlink()
            session.symlink_to(outside)
            lost = swapping_readlink(session, keep, outside, monkeypatch)
            replies = [await call(client, tool, arguments) for tool, arguments in requests]
    finally:
        monkeypatch.undo()
        server.history.close()
    assert lost and set(lost) == {"EINVAL"}, lost  # the race happened, as in the flaky run
    for (tool, arguments), (error, text, _) in zip(requests, replies, strict=True):
        assert "outsideword" not in text, (tool, text)
        assert error and text.startswith(ALLOWED), (tool, arguments["session"], text)
        assert str(home) not in text, text  # the home is not blamed


def test_a_path_that_cannot_be_resolved_is_placed_by_its_name(tmp_path, monkeypatch):
    """The handler's own decision, without the server: a failing file outside the home that
    cannot be resolved is still the session's problem; one inside the home stays a storage
    error."""
    home = tmp_path / "home"
    home.mkdir()
    session = tmp_path / "roots" / "s.jsonl"

    inside = home / "index" / "_cp1_1.toc"
    real_realpath = os.path.realpath

    def realpath(path, *args, **kwargs):  # as if a link in these names were being swapped
        if os.fspath(path) in (str(session), str(inside)):
            raise OSError(errno.EINVAL, "Invalid argument", os.fspath(path))
        return real_realpath(path, *args, **kwargs)

    monkeypatch.setattr(os.path, "realpath", realpath)
    with pytest.raises(SessionRefError, match="cannot read session .*Invalid argument"):
        with _unreadable_session(str(session), home):
            raise OSError(errno.EINVAL, "Invalid argument", str(session))
    for where in (inside, home / "catalog.json"):  # unresolvable or not: the home's problem
        with pytest.raises(OSError) as raised:
            with _unreadable_session(str(session), home):
                raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(where))
        assert not isinstance(raised.value, SessionRefError)
        assert raised.value.filename == str(where)


def test_a_session_file_deleted_after_listing_is_no_default_candidate(tmp_path, monkeypatch):
    """Without a session, the newest file run in this directory is used; a file that vanished
    between the listing and its stat is skipped (it was an OSError: a STORAGE_ERROR)."""
    import context_paging.index.service as service_module
    from context_paging.index.discovery import SessionFileRef
    from context_paging.index.service import History

    roots, home = agent_roots(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    folder = roots["claude"] / re.sub(r"[^A-Za-z0-9]", "-", str(work))  # Claude Code's naming
    folder.mkdir()
    lines = claude_lines("here", "insideword").replace('"cwd": "/work/c"', f'"cwd": "{work}"')
    (folder / "here.jsonl").write_text(lines)
    real_listing = service_module.iter_session_files

    def listing(roots):
        yield SessionFileRef("claude", "gone", folder / "gone.jsonl")  # deleted since listed
        yield from real_listing(roots)

    monkeypatch.setattr(service_module, "iter_session_files", listing)
    monkeypatch.setattr(service_module, "last_proxied", lambda *args: None)
    monkeypatch.chdir(work)
    history = History(roots, home)
    try:
        assert history.resolve_default(None) == "claude:here"
    finally:
        history.close()
