"""What a search covered, and the notes that tell the reader what to try next.

Every search reply carries a :class:`Searched`: the scope, the session (and how it was chosen
when none was given), how many sessions and items were searched. On no match its note says
what was searched and the next step, so neither a person nor a model takes "no hit" for "it
never happened". Pure values and strings: no I/O.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the CLI imports this module for its --help: no analyzer at start-up
    from context_paging.index.search.query import ParsedQuery

# The one default-session rule (the CLI's --help and the tools' session field show this text).
DEFAULT_SESSION_RULE = (
    "Without a session: the session select_context last saw in this process, else the newest "
    "session that ran in the current directory, else the conversation the context-paging proxy "
    "forwarded in the last 6 hours; the reply says which was used."
)
CHOSEN = {
    "select_context": "the session select_context last saw",
    "directory": "the newest session that ran in this directory",
    "proxy": "the conversation the context-paging proxy forwarded last",
}
# A quoted phrase is checked on the text of this many best candidates (those holding all its
# words); an unquoted query of several words puts its verbatim holders among this many first.
PHRASE_CANDIDATES = 200
PHRASE_POOL = 50


@dataclass(frozen=True, slots=True)
class Searched:
    scope: str  # "session" | "project" | "all"
    sessions: tuple[str, ...]  # the session searched (scope "session"), else ()
    session_count: int
    item_count: int
    project: str | None = None  # scope "project": the directory
    chosen_by: str | None = None  # "given" | "select_context" | "directory" | "proxy"

    def describe(self) -> str:
        if self.scope == "session":
            how = CHOSEN.get(self.chosen_by or "")
            what = f"{self.sessions[0]}" + (f" ({how}; no session was given)" if how else "")
            return f"Searched {what}: {self.item_count} items"
        where = f"under {self.project}" if self.scope == "project" else "in the index"
        return (f"Searched every session {where}: {self.session_count} sessions, "
                f"{self.item_count} items")


def searched_note(searched: Searched, parsed: ParsedQuery, found: bool, offset: int) -> str | None:
    """The note a reply carries about its scope: always when the proxy's conversation was
    used (another program chose it), and on no match with the next step."""
    if found:
        if searched.chosen_by == "proxy":
            return searched.describe() + "; pass session to search another."
        return None
    if offset:
        return f"{searched.describe()}; no hits past offset {offset}."
    steps = []
    if searched.scope != "all":
        steps.append("scope 'all' to search every session")
    if parsed.phrases:
        steps.append("the words without quotes")
    elif parsed.required or parsed.excluded or len(parsed.terms) > 1:
        steps.append("fewer words")
    else:
        steps.append("another spelling or a shorter part of the word")
    return f"{searched.describe()}; none matches {parsed.text!r}. Try " + " or ".join(steps) + "."


def filtered_note(searched: Searched, parsed: ParsedQuery, filters: Sequence[str],
                  emptying: Sequence[str]) -> str:
    """The note of a search whose query matches but whose filters leave nothing: which
    filters were given, and which one alone (when leaving out a single one brings hits back)
    emptied it."""
    given = ", ".join(filters)
    head = (f"{searched.describe()}; {parsed.text!r} matches items, but none that passes the "
            f"filters ({given}).")
    if len(emptying) == 1:
        return f"{head} It has hits without {emptying[0]}: that filter emptied it."
    if emptying:
        which = " or without ".join(emptying)
        return f"{head} It has hits without {which}: each of them alone emptied it."
    return f"{head} No single filter emptied it: leave out several."


def unknown_files_note(unknown: Sequence[str], searched: Searched) -> str:
    names = ", ".join(repr(f) for f in unknown)
    return (f"{searched.describe()}; no item touched a file matching {names} (a path, a "
            "suffix of one, or a file name), so the query was not tried. Leave files out, or "
            "search for the name as a word.")


def match_files(given: Sequence[str], known: Collection[str]
                ) -> tuple[tuple[tuple[str, ...], ...], list[str]]:
    """Each given file as the recorded paths it stands for, and the givens that match none.

    A file matches a recorded path equal to it, ending in it after a ``/`` (a suffix or a file
    name: ``handlers.go``, ``hooks/handlers.go``), or that it ends in (an absolute path given
    for a relative one recorded)."""
    alternatives, unknown = [], []
    for name in dict.fromkeys(given):
        tail = name.strip().rstrip("/").replace("\\", "/")
        found = tuple(sorted(p for p in known if _same_file(p.replace("\\", "/"), tail)))
        if found:
            alternatives.append(found)
        else:
            unknown.append(name)
    return tuple(alternatives), unknown


def _same_file(path: str, tail: str) -> bool:
    if not tail:
        return False
    return path == tail or path.endswith("/" + tail.lstrip("/")) or tail.endswith("/" + path)
