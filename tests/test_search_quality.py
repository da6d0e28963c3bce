"""Search quality on the sample and recorded sessions: an exact detail from an old tool output
finds its turn.

For every session, the test picks, from the tool outputs in the first half of the session, the
distinctive strings a model would search for later — an identifier or path that occurs in one
turn's output only, and a whole error line — and requires the turn that produced them among the
top three hits. The picking is mechanical (no hand-chosen queries), so every fixture is covered.
"""

from __future__ import annotations

import re

import pytest
from context_paging.index.history import result_text, search_text
from context_paging.index.search.analysis import compound_terms, term_counts, tokens
from context_paging.index.service import History

from tests.conftest import ALL_SAMPLES, recorded_params
from tests.test_protocol import lay_out

_IDENTIFIER = re.compile(r"[a-z]")
# An error *message*, not any line that mentions the word (theme keys, docs, handler code).
_ERRORISH = re.compile(r"\b(?:[A-Z]\w*)?(Error|Exception)\b:|\bERROR\b|\bFAILED\b|Traceback|"
                       r"No such file|command not found|Permission denied")


def candidates(items):
    """(query, owning history_id) pairs from the first half of a session's tool outputs."""
    half = items[: max(1, len(items) // 2)]
    frequency: dict[str, set[str]] = {}
    for item in items:
        for token in term_counts(search_text(item)):  # parts and pairs find items too
            frequency.setdefault(token, set()).add(item.history_id)
    picks = []
    for item in half:
        if item.kind != "model_turn" or item.is_recovery_turn:
            continue
        output = "\n".join(result_text(r) for r in item.tool_results)  # as search reads it
        # Unique as the index matches it: a compound of three or more parts also matches every
        # item holding all of its pairs (index.search.analysis), so those must be this item only
        #  too.
        unique = [t for t in dict.fromkeys(tokens(output))
                  if len(t) >= 5 and _IDENTIFIER.search(t)
                  and frequency.get(t) == {item.history_id}
                  and not _pairs_elsewhere(t, frequency, item.history_id)]
        unique.sort(key=lambda t: not any(c in t for c in "._/-0123456789"))  # identifiers first
        if unique:
            picks.append((unique[0], item.history_id))
        error_line = next((line.strip() for line in output.splitlines()
                           if _ERRORISH.search(line) and 20 <= len(line.strip()) <= 150
                           and any(frequency.get(t) == {item.history_id}
                                   for t in term_counts(line))),
                          None)
        if error_line:
            picks.append((error_line[:190], item.history_id))
    return picks


def _pairs_elsewhere(token, frequency, owner):
    pairs = compound_terms(token)[1]
    if not pairs:
        return False
    holders = set.intersection(*(frequency.get(p, set()) for p in pairs))
    return bool(holders - {owner})


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quality")
    roots = lay_out(tmp)
    history = History(roots, tmp / "home")
    yield history
    history.close()


@pytest.mark.parametrize("path", [*ALL_SAMPLES, *recorded_params()], ids=lambda p: p.name)
def test_a_distinctive_detail_from_an_early_tool_output_finds_its_turn_in_the_top_3(history, path):
    ref = next(f.ref for f in _files(history) if f.path.name.endswith(path.name))
    items = history.navigator(ref).raw
    picks = candidates(items)
    if not any(len(word) >= 5 for item in items[: max(1, len(items) // 2)]
               for result in item.tool_results for word in tokens(result_text(result))):
        assert picks == []  # a session without early tool output words has nothing to find
        return
    assert picks, "an early tool output should yield at least one distinctive detail"
    misses = []
    for query, owner in picks:
        hits = history.search(query, session=ref, limit=3).references
        if owner not in [hit["history_id"] for hit in hits]:
            misses.append(query)
    assert misses == []


def _files(history):
    from context_paging.index.discovery import iter_session_files

    return list(iter_session_files(history.catalog.roots))
