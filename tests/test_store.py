"""The persistent search index: tokenizer, BM25 order, filters, incremental sync, two processes,
crashes mid-commit and damaged files (docs/search.md; upstream's cases 79–81)."""

from __future__ import annotations

import logging
import math
import os
import select
import shutil
import signal
import string
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import regex
from context_paging.index.history import preview, project
from context_paging.index.model import Message, TextBlock, ToolCall
from context_paging.index.search.analysis import (
    MERGE_FACTOR,
    SCHEMA,
    query_terms,
    tokens,
    unescaped,
)
from context_paging.index.search.store import (
    INDEX_NAME,
    IndexBusy,
    IndexDoc,
    SearchIndex,
    SyncResult,
    doc_for,
    plan_sync,
)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from whoosh.filedb.filestore import FileStorage
from whoosh.index import TOC

T = "2026-01-01T00:00:00Z"


def doc(session: str, history_id: str, sequence: int, text: str, **kw) -> IndexDoc:
    kind = "model_turn" if kw.get("tools") or kw.get("files") else "user"
    return IndexDoc(session, history_id, sequence, kind, T, text, **kw)


def ids(hits) -> list[str]:
    return [h.history_id for h in hits]


@pytest.fixture
def index(tmp_path):
    with SearchIndex(tmp_path / "index") as ix:
        yield ix


# --- the tokenizer (docs/search.md) ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("INC-PAGER-047:", ["inc-pager-047"]),
        ("INC-PAGER-047.", ["inc-pager-047"]),
        ("/INC-PAGER-047/", ["inc-pager-047"]),
        ("-INC-PAGER-047-", ["inc-pager-047"]),
        ("INC/PAGER/047", ["inc/pager/047"]),
        ("see src/needle.ts, then", ["see", "src/needle.ts", "then"]),
        ("请分页显示历史记录", list("请分页显示历史记录")),
        ("abc请分页", ["abc请分页"]),  # a Han letter inside a run stays in it, as upstream
        ("camelCase snake_case a..b", ["camelcase", "snake_case", "a..b"]),
        ("Ünïcode ÉTÉ 4.5 -- _", ["ünïcode", "été", "4.5", "_"]),
        ("!!! \t ...", []),
    ],
)
def test_tokens_follow_the_upstream_tokenizer(text, expected):
    assert tokens(text) == expected


_UPSTREAM = regex.compile(r"\p{Script=Han}|[\p{L}\p{N}_./:-]+")


def upstream_tokens(text: str) -> list[str]:
    return [t for t in (m.strip("./:-") for m in _UPSTREAM.findall(text.lower())) if t]


@given(st.text(alphabet=st.sampled_from(string.printable + "éÉ请分页ßİК٣Ⅷ_"), max_size=80))
@example(text="\\r")  # a written escape is a space, not a word: upstream's regex reads 'r'
def test_the_ascii_fast_path_tokenizes_like_the_upstream_regex(text):
    """The same tokens as upstream's regex over the text the tokenizer reads (written escapes
    blanked: docs/search.md, "What is decoded")."""
    assert tokens(text) == upstream_tokens(unescaped(text))


def test_query_terms_are_deduplicated_in_first_seen_order():
    assert query_terms("Needle hay NEEDLE needle: hay") == ["needle", "hay"]


# --- items from real messages: upstream's cases 79–81 ---------------------------------------


def items_79_to_81():
    messages = [
        Message("user", "u1", T, (TextBlock("needle needle"),)),
        Message(
            "assistant", "a1", T,
            (TextBlock("I looked for the needle"),
             ToolCall("c1", "needle-tool", {"path": "src/needle.ts", "nested": {"value": 1}})),
            stop_reason="tool_use",
        ),
        Message("tool_result", "r1", T, (TextBlock("the result"),), tool_call_id="c1",
                tool_name="needle-tool", is_error=True),
        Message("user", "u2", T, (TextBlock("Decision: INC-PAGER-047 rollback v3\nRELEASE-003 "
                                            "approved"),)),
        Message("user", "u3", T, (TextBlock("INC-PAGER-074 is another incident"),)),
        Message("user", "u4", T, (TextBlock("the folder INC/PAGER/047 holds notes"),)),
        Message("user", "u5", T, (TextBlock("请分页显示历史记录"),)),
    ]
    return project(messages).items


@pytest.fixture
def upstream(index):
    items = items_79_to_81()
    index.sync("pi:s", [doc_for("pi:s", "/work/p", item) for item in items], {"size": 1})
    return index, {item.history_id: item for item in items}


def test_79_bm25_ranks_the_twice_needle_item_first_and_filters_match_exactly(upstream):
    index, _ = upstream
    assert ids(index.search("NEEDLE")) == ["u1", "a1"]
    for query in ("needle-tool", "src/needle.ts", "nested", "result"):
        assert ids(index.search(query)) == ["a1"], query
    filtered = dict(files=["src/needle.ts"], tools=["needle-tool"])
    assert ids(index.search("needle", failed=True, **filtered)) == ["a1"]
    assert index.search("needle", failed=False, **filtered) == []


def test_80_identifier_spellings_find_only_the_decision(upstream):
    index, items = upstream
    for query in ("INC-PAGER-047:", "INC-PAGER-047.", "/INC-PAGER-047/", "-INC-PAGER-047-"):
        assert ids(index.search(query)) == ["u2"], query
    assert ids(index.search("RELEASE-003")) == ["u2"]  # the second line is searchable too
    assert ids(index.search("INC-PAGER-074")) == ["u3"]
    assert ids(index.search("INC/PAGER/047")) == ["u4"]
    assert preview(items["u2"]) == "Decision: INC-PAGER-047 rollback v3 RELEASE-003 approved"


def test_81_tokenless_queries_find_nothing_and_han_characters_match_alone(upstream):
    index, _ = upstream
    for query in ("!!!", " ", "\t"):
        assert index.search(query) == []
    assert ids(index.search("分页")) == ["u5"]


def test_the_empty_query_returns_every_item_oldest_first(upstream):
    index, _ = upstream
    assert ids(index.search("", limit=10)) == ["u1", "a1", "u2", "u3", "u4", "u5"]
    assert ids(index.search("", limit=2)) == ["u1", "a1"]
    assert ids(index.search("", failed=True)) == ["a1"]
    assert all(h.score == 0.0 for h in index.search("", limit=10))


# --- ranking and filters ----------------------------------------------------------------------


def test_equal_scores_are_ordered_by_session_then_sequence_also_across_the_limit(index):
    # Added newest first, so Whoosh's document order is the reverse of the wanted order.
    index.sync("b", [doc("b", f"b{n}", n, "same words") for n in (9, 3)], {})
    index.sync("a", [doc("a", f"a{n}", n, "same words") for n in (7, 5, 6)], {})
    index.sync("c", [doc("c", "c0", 0, "same words more words")], {})
    assert ids(index.search("same", limit=10)) == ["a5", "a6", "a7", "b3", "b9", "c0"]
    assert ids(index.search("same", limit=2)) == ["a5", "a6"]
    assert ids(index.search("same", limit=4, sessions=["b", "c"])) == ["b3", "b9", "c0"]
    assert ids(index.search("", limit=10)) == ["a5", "a6", "a7", "b3", "b9", "c0"]


def test_scores_follow_upstream_bm25(index):
    index.sync("s", [doc("s", "a", 0, "needle needle hay"), doc("s", "b", 1, "needle hay hay"),
                     doc("s", "c", 2, "hay")], {})
    n, avg = 3, (3 + 3 + 1) / 3

    def bm25(tf: int, df: int, length: int) -> float:
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        return idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / avg))

    hits = index.search("needle")
    assert [(h.history_id, h.score) for h in hits] == [
        ("a", pytest.approx(bm25(2, 2, 3))),
        ("b", pytest.approx(bm25(1, 2, 3))),
    ]


def bm25_ranking(docs: list[IndexDoc], query: str, limit: int, sessions=None):
    """BM25 (docs/search.md, "Ranking") written out independently, with the statistics over all
    ``docs`` (every indexed item, see index.search.analysis.Bm25) and hits from ``sessions`` only;
    a search of one session takes that session's statistics
    (index.search.store.SESSION_STATISTICS)."""
    if sessions is not None and len(sessions) == 1:
        docs = [d for d in docs if d.session in sessions]
    counted = [(d, Counter(tokens(d.text))) for d in docs]
    n = len(counted)
    if not n:
        return []
    average = sum(sum(c.values()) for _, c in counted) / n
    terms = query_terms(query)
    df = {term: sum(1 for _, c in counted if c[term]) for term in terms}
    scored = []
    for d, counts in counted:
        score, length = 0.0, sum(counts.values())
        for term in terms:
            if counts[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                tf = counts[term]
                score += idf * ((tf * 2.2) / (tf + 1.2 * (0.25 + 0.75 * length / average)))
        if score and (sessions is None or d.session in sessions):
            scored.append((-score, d.session, d.sequence, d.history_id))
    return [(h, -s) for s, _, _, h in sorted(scored)[:limit]]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abc"), st.lists(st.sampled_from(["x", "y", "z", "w"]),
                                                     min_size=1, max_size=30)),
        min_size=1, max_size=40,
    ),
    st.sampled_from(["x", "y z", "w x"]),
    st.integers(1, 6),
)
def test_search_ranks_by_bm25_then_session_and_sequence(rows, query, limit):
    with tempfile.TemporaryDirectory() as tmp, SearchIndex(Path(tmp) / "index") as ix:
        by_session: dict[str, list[IndexDoc]] = {}
        for session, words in rows:  # one sync per row: several segments, odd document order
            items = by_session.setdefault(session, [])
            items.insert(0, doc(session, f"{session}{len(items)}", len(items), " ".join(words)))
            ix.sync(session, list(items), {})
        everything = [d for items in by_session.values() for d in items]
        for scope in (None, ["a", "b"], ["c"]):
            expected = bm25_ranking(everything, query, limit, scope)
            hits = ix.search(query, limit=limit, sessions=scope)
            assert [h.history_id for h in hits] == [h for h, _ in expected]
            assert [h.score for h in hits] == pytest.approx([s for _, s in expected])


def test_file_and_tool_filters_match_whole_values_with_any_characters(index):
    odd_file, odd_tool = "dir with space/a,b ü.ts", "mcp__srv__tool name, v2"
    index.sync(
        "s",
        [
            doc("s", "u", 0, "word"),
            doc("s", "t1", 1, "word", tools=(odd_tool, "bash"), files=(odd_file, "src/x.py")),
            doc("s", "t2", 2, "word", tools=("bash",), files=("src/x.py",), failed=True),
        ],
        {},
    )
    assert ids(index.search("word", files=[odd_file])) == ["t1"]
    assert ids(index.search("word", files=[odd_file, "src/x.py"])) == ["t1"]
    assert ids(index.search("word", files=["src/x.py"])) == ["t1", "t2"]
    for partial in ("a,b ü.ts", "dir with space", "SRC/X.PY", "src"):
        assert index.search("word", files=[partial]) == [], partial
    assert ids(index.search("word", tools=[odd_tool])) == ["t1"]
    assert index.search("word", tools=["mcp__srv__tool"]) == []
    assert ids(index.search("word", tools=["bash"], failed=True)) == ["t2"]
    assert ids(index.search("word", failed=False)) == ["u", "t1"]  # user items are not failed
    assert ids(index.search("", files=["src/x.py"], tools=["bash"])) == ["t1", "t2"]


def test_sessions_and_project_restrict_the_search(index):
    for session, cwd in (("a", "/work/p"), ("b", "/work/p/sub/"), ("c", "/work/project2"),
                         ("d", "/work"), ("e", "")):
        index.sync(session, [doc(session, f"{session}1", 0, "word", project=cwd)], {})
    assert ids(index.search("word", sessions=["a", "c"], limit=10)) == ["a1", "c1"]
    assert index.search("word", sessions=[]) == []
    assert ids(index.search("word", project="/work/p", limit=10)) == ["a1", "b1"]
    assert ids(index.search("word", project="/work/p/", limit=10)) == ["a1", "b1"]
    assert ids(index.search("word", project="/work", limit=10)) == ["a1", "b1", "c1", "d1"]
    assert ids(index.search("", project="/work/p/sub", limit=10)) == ["b1"]
    assert len(index.search("word", project=None, limit=10)) == 5


def test_recovery_tool_turns_are_stored_but_never_returned(index):
    messages = [
        Message("user", "u1", T, (TextBlock("find the zebra"),)),
        Message("assistant", "a1", T,
                (ToolCall("c1", "mcp__context-paging__search_history", {"query": "zebra"}),),
                stop_reason="tool_use"),
        Message("tool_result", "r1", T, (TextBlock("zebra found, unicorn too"),),
                tool_call_id="c1"),
    ]
    docs = [doc_for("s", "/p", item) for item in project(messages).items]
    assert [d.hidden for d in docs] == [False, True]
    index.sync("s", docs, {})
    assert ids(index.search("zebra")) == ["u1"]
    assert index.search("unicorn") == []
    assert ids(index.search("", limit=10)) == ["u1"]
    assert index.search("", tools=["mcp__context-paging__search_history"]) == []
    assert set(index.documents("s")) == {"u1", "a1"}


# --- incremental sync -------------------------------------------------------------------------


def test_the_sync_plan_adds_new_updates_changed_and_removes_missing_items():
    old = [doc("s", h, n, f"text {h}") for n, h in enumerate("abc")]
    stored = {d.history_id: d.fingerprint for d in old}
    new = [old[0], doc("s", "b", 1, "changed"), doc("s", "d", 3, "new"), doc("s", "d", 4, "dup")]
    plan = plan_sync(stored, new)
    assert [d.history_id for d in plan.add] == ["d"] and plan.add[0].text == "new"
    assert [d.history_id for d in plan.update] == ["b"]
    assert plan.remove == ("c",)
    assert plan_sync(stored, old).empty


def test_adding_one_item_writes_one_item(index):
    docs = [doc("s", f"h{n}", n, f"word{n}") for n in range(3)]
    index.sync("s", docs, {"size": 3})
    generation = index.generation
    more = [*docs, doc("s", "h3", 3, "word3")]
    assert index.sync("s", more, {"size": 4}) == SyncResult(1, 0, 0)
    assert index.generation == generation + 1
    assert ids(index.search("word3")) == ["h3"]
    assert index.documents("s") == {d.history_id: d.fingerprint for d in more}


def test_a_changed_item_is_rewritten_and_missing_items_are_deleted(index):
    first = [doc("s", "a", 0, "alpha"), doc("s", "b", 1, "beta"), doc("s", "c", 2, "gamma")]
    index.sync("s", first, {"size": 3})
    rolled_back = [doc("s", "a", 0, "alpha"), doc("s", "b", 1, "delta")]
    assert index.sync("s", rolled_back, {"size": 2}) == SyncResult(0, 1, 1)
    assert index.search("beta") == [] and index.search("gamma") == []
    assert ids(index.search("delta")) == ["b"]
    assert ids(index.search("", limit=10)) == ["a", "b"]


def test_a_resync_of_unchanged_items_opens_no_writer(index):
    docs = [doc("s", f"h{n}", n, f"word{n}") for n in range(3)]
    index.sync("s", docs, {"size": 3})
    generation, writers = index.generation, index.writers_opened
    assert index.sync("s", list(docs), {"size": 3}) == SyncResult(0, 0, 0)
    assert (index.generation, index.writers_opened) == (generation, writers)
    # A new file state alone is stored (so a restart can skip the file), in one commit.
    assert index.sync("s", docs, {"size": 4}) == SyncResult(0, 0, 0)
    assert index.file_state("s") == {"size": 4}
    assert index.generation == generation + 1


def test_many_small_commits_are_merged_and_lose_nothing(tmp_path):
    directory = tmp_path / "index"
    items: list[IndexDoc] = []
    with SearchIndex(directory) as ix:
        for n in range(40):  # a live session: one more item per sync
            items.append(doc("live", f"h{n}", n, f"step{n} common"))
            ix.sync("live", items, {"n": n})
        segments = TOC.read(FileStorage(str(directory)), INDEX_NAME, schema=SCHEMA).segments
        assert len(segments) < 2 * (MERGE_FACTOR - 1)
        assert ids(ix.search("common", limit=100)) == [f"h{n}" for n in range(40)]
        assert ids(ix.search("step39")) == ["h39"]


def test_sync_many_shares_one_commit_and_skips_unchanged_sessions(index):
    index.sync("old", [doc("old", "o", 0, "kept")], {"v": 1})
    generation = index.generation
    results = index.sync_many(
        [
            ("old", [doc("old", "o", 0, "kept")], {"v": 1}),
            ("x", [doc("x", "x1", 0, "shared")], {"v": 1}),
            ("y", [doc("y", "y1", 0, "shared")], {"v": 1}),
        ]
    )
    assert results == {"old": SyncResult(0, 0, 0), "x": SyncResult(1, 0, 0),
                       "y": SyncResult(1, 0, 0)}
    assert index.generation == generation + 1
    assert ids(index.search("shared")) == ["x1", "y1"]
    assert index.indexed_sessions() == {"old": {"v": 1}, "x": {"v": 1}, "y": {"v": 1}}


def test_a_document_of_another_session_is_refused(index):
    with pytest.raises(ValueError, match="belongs to 'b'"):
        index.sync("a", [doc("b", "h", 0, "text")], {})


def test_close_and_reopen_keeps_items_and_file_states(tmp_path):
    with SearchIndex(tmp_path / "index") as first:
        first.sync("s", [doc("s", "a", 0, "alpha beta"), doc("s", "b", 1, "beta")], {"size": 7})
        before = first.search("beta")
    with SearchIndex(tmp_path / "index") as again:
        assert again.search("beta") == before
        assert again.file_state("s") == {"size": 7}
        assert again.indexed_sessions() == {"s": {"size": 7}}
        assert again.file_state("unknown") is None


def test_surrogates_in_text_files_and_tools_are_indexed_and_found(index):
    odd = "bad\udc80name"
    index.sync("s", [doc("s", "h", 0, f"text {odd}", tools=(odd,), files=(odd,))], {})
    assert ids(index.search(odd, files=[odd], tools=[odd])) == ["h"]


# --- locking, processes, crashes, damage ------------------------------------------------------


def test_a_held_writer_lock_raises_index_busy_naming_the_directory_and_reads_go_on(tmp_path):
    directory = tmp_path / "index"
    with SearchIndex(directory, lock_timeout=0.2) as ix:
        ix.sync("s", [doc("s", "a", 0, "alpha")], {})
        lock = FileStorage(str(directory)).lock(f"{INDEX_NAME}_WRITELOCK")
        assert lock.acquire()
        try:
            with pytest.raises(IndexBusy, match=str(directory)):
                ix.sync("s", [doc("s", "a", 0, "alpha"), doc("s", "b", 1, "beta")], {})
            assert ids(ix.search("alpha")) == ["a"]
        finally:
            lock.release()
        assert ix.sync("s", [doc("s", "a", 0, "alpha"), doc("s", "b", 1, "beta")], {}).added == 1


WRITER_CHILD = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from context_paging.index.search.store import IndexDoc, SearchIndex

    directory, name = Path(sys.argv[1]), sys.argv[2]
    ix = SearchIndex(directory, lock_timeout=30)
    print("ready", flush=True)
    sys.stdin.readline()  # "go", once both processes are ready
    start = time.monotonic()
    for s in range(4):
        session = f"{name}:{s}"
        docs = [IndexDoc(session, f"{session}-{i}", i, "user", "t", f"common {name} w{i} " * 30)
                for i in range(60)]
        ix.sync(session, docs, {"n": s})
    print(start, time.monotonic(), flush=True)
    ix.close()
    """
)


def test_two_processes_syncing_different_sessions_at_once_lose_nothing(tmp_path):
    directory = tmp_path / "index"
    children = [
        subprocess.Popen([sys.executable, "-c", WRITER_CHILD, str(directory), name],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
        for name in ("left", "right")
    ]
    for child in children:
        assert _read_line(child.stdout, 60) == "ready\n"
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    windows = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err
        windows.append([float(x) for x in out.split()])
    assert max(w[0] for w in windows) < min(w[1] for w in windows), "the syncs did not overlap"
    with SearchIndex(directory) as ix:
        sessions = ix.indexed_sessions()
        assert sorted(sessions) == sorted(f"{n}:{s}" for n in ("left", "right") for s in range(4))
        for session in sessions:
            assert len(ix.documents(session)) == 60
        assert len(ix.search("", limit=1000)) == 480
        assert len(ix.search("common", limit=1000)) == 480


KILLED_CHILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from whoosh.writing import SegmentWriter
    from context_paging.index.search.store import IndexDoc, SearchIndex

    original = SegmentWriter.commit
    def commit(self, *args, **kwargs):
        os.write(1, b"commit\\n")
        original(self, *args, **kwargs)
        os.write(1, b"committed\\n")
    SegmentWriter.commit = commit

    ix = SearchIndex(Path(sys.argv[1]))
    words = " ".join(f"w{k}" for k in range(300))
    session = sys.argv[3]  # new each time: a kill after the commit leaves nothing to redo
    docs = [IndexDoc(session, f"b{i}", i, "user", "t", f"big{i} {words} {i * 7919}")
            for i in range(int(sys.argv[2]))]
    ix.sync(session, docs, {"n": len(docs)})
    """
)


def _read_line(stream, timeout: float) -> str:
    ready, _, _ = select.select([stream], [], [], timeout)
    return stream.readline() if ready else ""


def test_a_writer_killed_mid_commit_leaves_an_index_the_next_open_can_use(tmp_path, caplog):
    directory = tmp_path / "index"
    base = [doc("base", f"k{n}", n, f"kept{n} words") for n in range(20)]
    with SearchIndex(directory) as ix:
        ix.sync("base", base, {"v": 1})
    landed_inside = 0
    for attempt, delay in enumerate((0.0, 0.1, 0.4, 0.8, 1.1)):  # a commit takes about 1 s
        child = subprocess.Popen(
            [sys.executable, "-c", KILLED_CHILD, str(directory), "600", f"big{attempt}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            assert _read_line(child.stdout, 60) == "commit\n", child.stderr.read()
            try:
                child.wait(timeout=delay)  # a bounded wait into the commit, then the kill
            except subprocess.TimeoutExpired:
                os.kill(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
            rest = child.stdout.read()
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(timeout=30)
            child.stdout.close()
            child.stderr.close()
        if child.returncode == -signal.SIGKILL and "committed" not in rest:
            landed_inside += 1
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="context_paging"):
            with SearchIndex(directory) as ix:
                rebuilt = "started an empty index" in caplog.text
                found = ids(ix.search("words", sessions=["base"], limit=100))
                assert found == ([] if rebuilt else [d.history_id for d in base])
                assert leftovers(directory) == []
                ix.sync("base", base, {"v": 1})
                assert len(ix.search("words", sessions=["base"], limit=100)) == 20
    assert landed_inside >= 1, "no kill landed inside a commit"


def leftovers(directory: Path) -> list[str]:
    """Files that belong to no segment of the current table of contents."""
    toc = TOC.read(FileStorage(str(directory)), INDEX_NAME, schema=SCHEMA)
    current = {segment.segment_id() for segment in toc.segments}
    return [
        p.name for p in directory.iterdir()
        if p.name not in (f"_{INDEX_NAME}_{toc.generation}.toc", f"{INDEX_NAME}_WRITELOCK")
        and p.name.split(".")[0] not in current
    ]


@pytest.mark.parametrize("damaged", ["toc", "segments", "everything"])
def test_a_damaged_index_is_moved_aside_and_replaced_by_an_empty_one(tmp_path, caplog, damaged):
    directory = tmp_path / "index"
    with SearchIndex(directory) as ix:
        ix.sync("s", [doc("s", f"h{n}", n, f"word{n} text") for n in range(50)], {"v": 1})
    for path in directory.iterdir():
        is_toc = path.name.endswith(".toc")
        if path.is_file() and (damaged == "everything" or (damaged == "toc") == is_toc):
            if not path.name.endswith("WRITELOCK"):
                path.write_bytes(os.urandom(max(path.stat().st_size, 64)))
    with caplog.at_level(logging.WARNING, logger="context_paging"):
        with SearchIndex(directory) as ix:
            assert "moved it to" in caplog.text
            assert ix.search("", limit=100) == [] and ix.indexed_sessions() == {}
            ix.sync("s", [doc("s", "h0", 0, "word0 text")], {"v": 1})
            assert ids(ix.search("word0")) == ["h0"]
    aside = [p.name for p in tmp_path.iterdir() if p.name.startswith("index.broken-")]
    assert len(aside) == 1


def test_a_deleted_index_directory_is_recreated_empty_also_while_open(tmp_path):
    directory = tmp_path / "index"
    with SearchIndex(directory) as ix:
        ix.sync("s", [doc("s", "a", 0, "alpha")], {"v": 1})
        shutil.rmtree(directory)
        assert ix.search("alpha") == [] and ix.file_state("s") is None
        assert ix.sync("s", [doc("s", "a", 0, "alpha")], {"v": 1}) == SyncResult(1, 0, 0)
        assert ids(ix.search("alpha")) == ["a"]
    shutil.rmtree(directory)
    with SearchIndex(directory) as ix:
        assert ix.indexed_sessions() == {}


def test_an_index_an_earlier_version_wrote_is_deleted_and_built_again(tmp_path):
    """The analyzer changed (escapes, decoded outputs): the index name changes with it, the old
    files go and the sessions are indexed again with today's terms."""
    directory = tmp_path / "ix"
    directory.mkdir()
    old = ["_cp1_3.toc", "cp1_0123456789abcdef.seg", "cp1_WRITELOCK"]
    for name in old:
        (directory / name).write_bytes(b"old")
    (directory / "cp1.tmp").mkdir()
    (directory / "notes.txt").write_text("not the index's")
    doc = IndexDoc(session="pi:s", history_id="h1", sequence=0, kind="model_turn",
                   timestamp="", text='{"output":"STEP-1\\nMARKER-0003"}')
    with SearchIndex(directory) as ix:
        ix.sync("pi:s", [doc], {})
        assert [h.history_id for h in ix.search("marker-0003")] == ["h1"]
    left = sorted(p.name for p in directory.iterdir())
    assert not [n for n in left if n.startswith(("_cp1_", "cp1"))] and "notes.txt" in left
