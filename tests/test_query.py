"""index.search.query: what a query asks for, and the lines of an item it matched."""

from __future__ import annotations

from context_paging.index.history import HistoryItem
from context_paging.index.model import Message, TextBlock, ToolCall
from context_paging.index.search.notes import match_files
from context_paging.index.search.query import holds_run, marked, matches, parse


def test_a_plain_query_ranks_exactly_as_written():
    parsed = parse("Could not read file")
    assert (parsed.ranked, parsed.phrases, parsed.required, parsed.excluded) == \
        ("Could not read file", (), (), ())
    assert parsed.verbatim == ("could", "not", "read", "file")


def test_quotes_make_a_phrase_whose_words_are_required():
    parsed = parse('"could not" read -manual --verbose')
    assert parsed.phrases == (("could", "not"),)
    assert parsed.required == ("could", "not")
    assert parsed.excluded == ("manual",)
    assert parsed.ranked == "could not read verbose"  # --verbose is a word, not an exclusion
    assert parsed.verbatim == ()


def test_and_requires_every_word_and_or_is_dropped():
    assert parse("pager AND step OR done").required == ("pager", "step", "done")
    assert parse("pager OR step").ranked == "pager step"


def test_an_unclosed_quote_runs_to_the_end():
    assert parse('"no such file').phrases == (("no", "such", "file"),)


def test_a_run_must_stand_together_and_in_order():
    assert holds_run("E: No such file or directory", ("no", "such", "file"))
    assert not holds_run("no file such", ("no", "such", "file"))
    assert holds_run("ошибка: нет файла", ("нет", "файла"))


def item(*outputs: str) -> HistoryItem:
    calls = tuple(ToolCall(id=f"c{n}", name="bash", arguments={"command": "x"})
                  for n in range(len(outputs)))
    results = tuple(Message(role="tool_result", id=f"r{n}", timestamp="",
                            content=(TextBlock(text=o),), tool_call_id=f"c{n}", tool_name="bash")
                    for n, o in enumerate(outputs))
    return HistoryItem(kind="model_turn", history_id="h", sequence=0, timestamp="",
                       message=Message(role="assistant", id="a", timestamp="", content=calls),
                       tool_results=results)


def test_the_phrase_line_is_shown_first_with_its_span_and_line_number():
    turn = item("read the file\nfile not found", "ok\nerror: file not found here")
    (first,) = matches(turn, parse('"file not found"'))[:1]
    assert (first["tool_call_id"], first["line"], first["text"], first["spans"]) == \
        ("c0", 2, "file not found", [[0, 14]])
    assert [m["tool_call_id"] for m in matches(turn, parse('"file not found"'))] == ["c0", "c1"]
    assert marked("error: file not found here", [[7, 21]]) == "error: «file not found» here"


def test_a_long_line_is_clipped_around_its_match():
    line = "x" * 500 + " needle " + "y" * 500
    (shown,) = matches(item(line), parse("needle"))
    text = shown["text"]
    assert text.startswith("…") and text.endswith("…") and len(text) == 202
    start, end = shown["spans"][0]
    assert text[start:end] == "needle"


def test_files_match_a_suffix_a_name_or_an_absolute_path_and_unknowns_are_listed():
    known = {"src/hooks/handlers.go", "/abs/pkg/main.go", "other/handlers.go.bak"}
    found, unknown = match_files(["handlers.go", "/work/app/src/hooks/handlers.go",
                                  "pkg/main.go", "nothere.go"], known)
    assert found == (("src/hooks/handlers.go",), ("src/hooks/handlers.go",),
                     ("/abs/pkg/main.go",))
    assert unknown == ["nothere.go"]


def test_a_reply_that_used_the_proxys_conversation_says_so_even_with_hits():
    from context_paging.index.search.notes import Searched, searched_note

    searched = Searched("session", ("ledger:abc",), 1, 40, None, "proxy")
    assert searched_note(searched, parse("needle"), True, 0) == (
        "Searched ledger:abc (the conversation the context-paging proxy forwarded last; no "
        "session was given): 40 items; pass session to search another.")
    mine = Searched("session", ("pi:x",), 1, 40, None, "directory")
    assert searched_note(mine, parse("needle"), True, 0) is None


def test_a_path_query_marks_the_part_of_a_longer_path_it_stands_in():
    (shown,) = matches(item("M src/components/Modal.tsx"), parse("components/Modal.tsx"))
    start, end = shown["spans"][0]
    assert shown["text"][start:end] == "components/Modal.tsx"
    assert matches(item("xcomponents/Modal.tsx"), parse("components/Modal.tsx")) == []
