"""paging.distill's ``local`` judge: which chunks it keeps on the words it shares with the work
(this port's judge; no upstream case).
"""

from __future__ import annotations

from context_paging.paging.distill import (
    Chunk,
    ChunkOptions,
    LocalJudge,
    Question,
    chunk_output,
    distill,
)
from context_paging.paging.distill import judge as judge_module
from context_paging.paging.distill.model import JudgeContext
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import CONFIG, grep_output, judge_context, lines, run_end


def test_local_judge_keeps_every_chunk_with_an_identifier_path_or_quoted_line_of_the_answer():
    text = "\n".join(
        [f"src/mod{i}.ts:{k}:" + f"const value{i} = compute();".ljust(60, ".")
         for i in range(12) for k in range(1, 9)] + ["tail"])
    chunks = chunk_output(text, ChunkOptions(120, 600, 600))
    answer = ("The bug is in `retryPolicy` (see src/mod3.ts) and the line "
              f"`{chunks[7].text.split(chr(10))[0][len('src/mod7.ts:1:'):].strip('.')}` "
              "matters; also parseConfig_v2.")
    chunks = [Chunk(c.index, c.start, c.end, c.text + ("\nretryPolicy()" if c.index == 5 else "")
                    + ("\nparseConfig_v2" if c.index == 9 else ""), c.files) for c in chunks]
    context = judge_context(kind="output", superseded=("the file changed",))
    scores = LocalJudge().judge(Question("Why does it fail?", answer=answer), chunks, context)
    kept = {i for i, s in scores.items() if s >= 0.6}
    assert {3, 5, 7, 9} <= kept and scores[0] == 0.0
    assert LocalJudge().judge(Question(""), chunks, context) is None


def test_local_judge_removes_grep_files_unrelated_to_the_answer_and_keeps_when_unsure():
    entries = run_end([("bash", {"command": "rg retry"},
                         grep_output([f"src/client{i}.ts" for i in range(8)], 16))],
                       answer="Only src/client2.ts and src/client5.ts retry.")
    [d] = distill(entries, CONFIG)
    assert d.action == "distill" and d.judge == "local"
    assert "src/client2.ts:1:" in d.replacement and "src/client5.ts:1:" in d.replacement
    assert "src/client0.ts:1:" not in d.replacement
    vague = run_end([("bash", {"command": "cat notes"}, lines(200, "retry"))],
                     answer="Every retry line matters.")
    assert [x.action for x in distill(vague, CONFIG)] == ["keep"]


def _grep_chunks(bodies: dict[str, str], per_file: int = 6) -> list[Chunk]:
    """One chunk per file: ``per_file`` grep lines of ``file:n:<body>``."""
    text = "\n".join(f"{f}:{n + 1}:  {body} {n}" for f, body in bodies.items()
                     for n in range(per_file))
    return chunk_output(text, ChunkOptions(120, 300, 300))


def test_local_judge_keeps_grep_chunks_on_two_distinctive_words_not_on_the_pattern_or_one():
    bodies = {"src/retry.ts": "backoff jitter delay status", "src/cache.ts": "cache status",
              "src/log.ts": "logger status", "src/a.ts": "status", "src/b.ts": "status",
              "src/c.ts": "status", "src/d.ts": "status", "src/e.ts": "status flag"}
    chunks = _grep_chunks(bodies)
    assert [c.files for c in chunks] == [(f,) for f in bodies]
    context = judge_context(arguments='{"command":"rg -n status"}', labels=("bash `rg -n status`",))
    answer = "Retries use exponential backoff with jitter; the cache keeps its status, flags too."
    scores = LocalJudge().judge(Question("Which status?", answer=answer), chunks, context)
    # backoff + jitter: kept. cache alone: one word, below 0.6. status is the pattern and in
    # every chunk; flag is shared too, but alone. logger shares nothing.
    assert scores == {0: 0.75, 1: 0.5, 2: 0.0, 3: 0.0, 4: 0.0, 5: 0.0, 6: 0.0, 7: 0.5}


def test_local_judge_drops_grep_words_found_in_more_than_a_quarter_of_the_chunks():
    bodies = {f"src/m{i}.ts": "reducer failed active" + (" retries" if i == 0 else "")
              for i in range(8)}
    chunks = _grep_chunks(bodies)
    answer = "Only m0 retries; every reducer handles failed and active states."
    scores = LocalJudge().judge(Question("Where?", answer=answer), chunks,
                                judge_context(arguments='{"command":"rg reducer"}'))
    # reducer is the pattern; failed and active are in all 8 chunks: only "retries" counts.
    assert scores == {i: 0.5 if i == 0 else 0.0 for i in range(8)}


def test_local_judge_keeps_a_read_window_on_one_shared_word():
    text = lines(40, "alpha") + "\n" + lines(40, "beta")
    chunks = chunk_output(text, ChunkOptions(120, 600, 600))
    scores = LocalJudge().judge(Question("Explain the beta part"), chunks, judge_context())
    beta = [c.index for c in chunks if "beta" in c.text]
    assert beta and all(scores[i] == 0.65 for i in beta)
    assert all(scores[c.index] == 0.0 for c in chunks if c.index not in beta)


def test_local_judge_does_not_count_a_logs_own_command_words_as_evidence():
    # 20 seeded test runs: every window says "tests", and so does the request, but only
    # because the command names the folder; the run's answer quotes the summary line.
    text = lines(60, "tests/test_cart.py ....") + "\n500 passed in 3.20s"
    chunks = chunk_output(text, ChunkOptions(120, 600, 600))
    question = Question("Keep the tests fast", answer="`500 passed in 3.20s` on every seed.")
    context = judge_context(labels=("bash `pytest -q tests/ --seed=3`",),
                       arguments='{"command":"pytest -q tests/ --seed=3"}')
    scores = LocalJudge().judge(question, chunks, context)
    assert scores[chunks[-1].index] == 1.0
    assert all(scores[c.index] == 0.0 for c in chunks[:-1])
    # The same window read from a file keeps its one shared word.
    read = judge_context(labels=("read tests/log.txt",), tool="read",
                    arguments='{"path":"tests/log.txt"}')
    assert LocalJudge().judge(question, chunks, read)[chunks[0].index] == 0.65


def test_local_judge_omits_exchanges_sharing_only_tool_names_and_keeps_one_word():
    texts = ["user prompt: Fix the retry backoff in the payments client\nfinal answer: done\n"
             "tool calls: read src/pay.ts",
             "user prompt: Update the README badge\nfinal answer: done\ntool calls: read README.md",
             "user prompt: Why is the date picker test flaky?\nfinal answer: timezone\n"
             "tool calls: bash `npm test`"]
    chunks = [Chunk(k, 0, 0, t) for k, t in enumerate(texts)]
    question = Question("Add retry with backoff to the orders client and a test.",
                        latest_note="Reading the orders client.")
    scores = LocalJudge().judge(question, chunks, JudgeContext("exchange", "mid-run", ("x",) * 3))
    # retry + backoff + client: kept; "read" is a tool name: nothing, omitted; "test" alone:
    # unsure, so kept (omission needs P < 0.2; measured on the fixtures, bench/fixture_eval.py).
    assert {i: round(s, 2) for i, s in scores.items()} == {0: 0.85, 1: 0.05, 2: 0.2}


def test_local_judge_small_outputs_need_two_words_and_count_their_call():
    chunks = [Chunk(0, 0, 1, "export function parseCsv(text) { return rows }"),
              Chunk(1, 0, 1, "a1b2c3d ledgerly 2.3.1 initial import"),
              Chunk(2, 0, 1, "export const quote = (value) => value")]
    context = JudgeContext("small", "mid-run",
                           ("read src/csv/parse.js", "bash `git log`", "read src/csv/write.js"),
                           ("",) * 3, (False,) * 3)
    question = Question("Fix the parse errors in the rows of the csv import",
                        latest_note="Looking at the parser.")
    scores = LocalJudge().judge(question, chunks, context)
    # parse (from the call's path) + rows; import alone; nothing.
    assert scores == {0: 0.75, 1: 0.4, 2: 0.1}


def test_at_run_end_only_the_answer_or_next_request_keeps_an_out_of_date_output():
    chunks = [Chunk(0, 0, 1, "def load_config(path): ...")]
    context = judge_context(superseded=("the file changed after this read",))
    notes_only = Question("Fix it", answer="Done.", notes="`load_config` reads the path.")
    in_answer = Question("Fix it", answer="I changed `load_config`.")
    next_request = Question("Fix it", answer="Done.", follow_up="Why does load_config fail?")
    assert LocalJudge().judge(notes_only, chunks, context) == {0: 0.0}
    assert LocalJudge().judge(in_answer, chunks, context) == {0: 1.0}
    assert LocalJudge().judge(next_request, chunks, context) == {0: 1.0}
    current = judge_context()
    assert LocalJudge().judge(notes_only, chunks, current) == {0: 1.0}
    checkpoint = Question("Fix it", latest_note="`load_config` reads the path.")
    assert LocalJudge().judge(checkpoint, chunks, judge_context(phase="mid-run",
                                                           superseded=("newer",))) == {0: 1.0}


def test_a_quoted_line_counts_with_its_spacing_evened_out_and_once_at_a_checkpoint():
    """A line the notes quote (a fenced block) is found in a chunk that spaces it otherwise,
    as in a column-aligned log; at a checkpoint the final evidence is the decisive one, asked
    once, and a chunk that does not hold it gets no 1.0 from it."""
    chunks = [Chunk(0, 1, 3, "total   =   sum(weights)  # aligned\nnext line"),
              Chunk(1, 3, 5, "nothing of the sort here\nat all")]
    notes = "I changed it:\n```\ntotal = sum(weights)  # aligned\n```\n"
    for phase in ("mid-run", "run-end"):
        context = judge_context(kind="output", phase=phase)
        question = (Question("fix the sum", latest_note=notes) if phase == "mid-run"
                    else Question("fix the sum", answer=notes))
        scores = LocalJudge().judge(question, chunks, context)
        assert scores is not None and scores[0] == 1.0 and scores[1] < 1.0


_NAMES = st.text(alphabet="ab/.", max_size=8)


@settings(max_examples=300, deadline=None)
@given(files=st.lists(_NAMES, max_size=5), paths=st.frozensets(_NAMES, max_size=5))
def test_a_chunk_names_a_path_exactly_when_a_file_is_it_or_ends_in_slash_and_it(files, paths):
    from context_paging.paging.distill import judge

    pairwise = any(f == p or f.endswith("/" + p) for f in files for p in paths)
    assert judge._names_a_path(files, paths) == pairwise


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("abZ_09 .-\n:é") + ["\ud800", "字", "\u0663"]),
               max_size=60) | st.text(max_size=40))
def test_the_words_of_a_text_are_the_word_patterns_matches(text):
    """The words a chunk shares with the work are split out with a byte table in C: the same
    set as the pattern's matches (a word starts at a letter, four characters or more)."""
    from context_paging.paging.distill import judge

    assert judge._words(text) == set(judge._WORD.findall(text))


# --- paths in a text, around runs too long to be one -------------------------------------------

_PATHISH = st.text(alphabet="ab1_.-/@~+ :\n", max_size=300)


@given(_PATHISH)
@settings(max_examples=300, deadline=None)
def test_paths_of_a_text_without_long_runs_are_the_patterns_matches(text):
    assert judge_module._paths(text) == judge_module._PATH.findall(text)


def test_a_run_too_long_to_be_a_path_is_left_out_and_the_text_around_it_is_read():
    limit = judge_module.PATH_RUN_LIMIT
    blob = "x" * 48_000 + "/y.py"  # one run: a pasted token, a path at its end
    text = f"see src/a.py, then {blob} and lib/b/c.ts"
    assert judge_module._paths(text) == ["src/a.py", "lib/b/c.ts"]
    assert judge_module.Evidence.of_text(text).paths == {"src/a.py", "lib/b/c.ts"}
    just_short = "d" * (limit - 6) + "/e.py"  # one character under the limit: still a path
    assert judge_module._paths(f"x {just_short} y") == [just_short]
    assert judge_module._paths(f"x {just_short}z y") == []
