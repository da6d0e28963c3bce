"""paging.distill: chunking an output and rendering what is kept of it (docs/distillation.md,
"Chunking", "Replacement texts"), upstream's numbered cases 01–12 and 30–33.

Fixtures follow upstream's: filler lines of 60 chars, grep lines ``file:n:match yyy…``.
"""

from __future__ import annotations

import math

from context_paging.paging.distill import (
    MARKER,
    Chunk,
    ChunkOptions,
    chunk_output,
    grep_file,
    is_grep_like,
    segment_chunks,
)
from context_paging.paging.distill.render import Source, format_chars, render_output, tool_label

from tests.builders import grep_output, lines


def assert_covers(text, chunks):
    assert [c.index for c in chunks] == list(range(len(chunks)))
    assert all(a.end == b.start for a, b in zip(chunks, chunks[1:], strict=False))
    assert chunks[0].start == 0 and chunks[-1].end == len(text.split("\n"))
    assert "\n".join(c.text for c in chunks) == text


# --- chunking ------------------------------------------------------------------------------

def test_01_grep_file_recognises_match_context_and_separator_lines():
    assert grep_file("src/a.ts:12:const a") == "src/a.ts"
    assert grep_file("src/a.ts-13-const b") == "src/a.ts"
    assert grep_file("src/my-file.ts-4-x") == "src/my-file.ts"
    assert grep_file("docs/2024-05-01-post.md:3:hello") == "docs/2024-05-01-post.md"
    assert grep_file("--") == ""
    assert [grep_file(x) for x in ("plain text line", " indented:1:x", "")] == [None] * 3


def test_02_context_lines_of_dash_digit_names_resolve_to_the_longest_known_file():
    known = {"docs/2024-05-01-post.md", "docs/2024"}
    assert grep_file("docs/2024-05-01-post.md-4-context", known) == "docs/2024-05-01-post.md"
    assert grep_file("docs/2024-05-01-post.md-4-context") == "docs/2024"


def test_03_grep_like_needs_three_lines_and_sixty_percent_matches():
    assert not is_grep_like(["a.ts:1:x", "a.ts:2:y"])
    assert is_grep_like(["a.ts:1:x", "a.ts-2-y", "--", "b.ts:9:z", ""])
    assert not is_grep_like(["a.ts:1:x", "b.ts:2:y", "hello", "world", "again"])
    assert is_grep_like(["a.ts:1:x", "b.ts:2:y", "c.ts:3:z", "note", "more"])
    assert not is_grep_like(lines(10).split("\n"))


def test_timestamped_logs_are_not_grep_output_but_spaced_paths_with_extensions_are():
    for stamp in ("2024-05-01 12:30:{:02d} INFO served", "2024-05-01T12:30:{:02d}Z ok",
                  "12:30:{:02d} worker up"):
        log = "\n".join(stamp.format(i) for i in range(30))
        assert not is_grep_like(log.split("\n"))
        assert all(c.files == () for c in chunk_output(log))
    assert grep_file("My Documents/notes.md:3:x") == "My Documents/notes.md"


def test_04_grep_output_is_grouped_by_file():
    files = ["src/alpha.ts", "src/my-beta.ts", "docs/2024-05-01-post.md"]
    text = grep_output(files, 12)
    chunks = chunk_output(text, ChunkOptions(120, 1_000, 4_000))
    assert_covers(text, chunks)
    assert [(c.start, c.end, c.files) for c in chunks] == [
        (0, 12, (files[0],)), (12, 24, (files[1],)), (24, 36, (files[2],))]


def _blocks(file, *ns):
    return [x for n in ns for x in (f"{file}-{n - 1}-before".ljust(70, "."),
                                    f"{file}:{n}:match".ljust(70, "."),
                                    f"{file}-{n + 1}-after".ljust(70, "."), "--")]


def test_05_context_lines_and_separators_stay_with_their_file():
    text = "\n".join(_blocks("src/a-b.ts", 10, 30) + _blocks("lib/c.ts", 5, 50))
    chunks = chunk_output(text, ChunkOptions(120, 600, 600))
    assert_covers(text, chunks)
    assert [c.files for c in chunks] == [("src/a-b.ts",), ("lib/c.ts",)]
    assert chunks[0].end == 8


def test_06_date_named_files_group_correctly():
    text = "\n".join(_blocks("docs/2024-05-01-a.md", 10, 30) + _blocks("docs/2024-06-02-b.md", 5))
    chunks = chunk_output(text, ChunkOptions(120, 500, 500))
    assert [(c.start, c.end, c.files) for c in chunks] == [
        (0, 8, ("docs/2024-05-01-a.md",)), (8, 12, ("docs/2024-06-02-b.md",))]


def test_07_big_grep_groups_are_split_and_never_mix_files():
    text = grep_output(["src/huge.ts", "src/small.ts"], 100)
    chunks = chunk_output(text, ChunkOptions(120, 1_000, 1_000))
    assert_covers(text, chunks)
    assert len(chunks) > 4
    for c in chunks:
        assert len(c.files) == 1 and len(c.text) <= 1_000
        assert all(line.startswith(c.files[0] + ":") for line in c.text.split("\n"))


def test_08_tiny_grep_groups_are_merged_up_to_half_the_target():
    files = [f"src/f{i}.ts" for i in range(30)]
    chunks = chunk_output(grep_output(files, 1, 20), ChunkOptions(120, 800, 800))
    assert 3 <= len(chunks) < len(files)
    assert all(len(c.text) + 1 <= 400 for c in chunks)
    assert [f for c in chunks for f in c.files] == files


def test_09_plain_text_is_windowed_ending_after_blank_lines():
    text = "\n\n".join(lines(8, f"p{n}", 50) for n in range(10))
    chunks = chunk_output(text, ChunkOptions(120, 1_000, 1_000))
    assert_covers(text, chunks)
    assert len(chunks) > 1 and all(len(c.text) <= 1_000 and c.files == () for c in chunks)
    assert all(text.split("\n")[c.end - 1] == "" for c in chunks[:-1])


def test_10_the_target_grows_to_respect_max_chunks():
    assert len(chunk_output(lines(2_000), ChunkOptions(10, 100, 500))) <= 11


def test_11_a_very_long_line_is_a_chunk_of_its_own():
    chunks = chunk_output(f"short\n{'z' * 10_000}\nshort again", ChunkOptions(120, 800, 800))
    assert any(c.text == "z" * 10_000 for c in chunks)


def test_12_segments_respect_both_limits_and_isolate_oversized_chunks():
    chunks = chunk_output(lines(400), ChunkOptions(120, 500, 500))
    assert len(segment_chunks(chunks, 1_000_000, 7)) == math.ceil(len(chunks) / 7)
    big = chunk_output(f"a\n{'z' * 5_000}\nb", ChunkOptions(120, 100, 100))
    assert any(len(s) == 1 and len(s[0].text) == 5_000 for s in segment_chunks(big, 1_000, 10))
    assert segment_chunks([], 100, 10) == []


# --- render --------------------------------------------------------------------------------

def test_30_format_chars_and_tool_labels():
    assert [format_chars(n) for n in (999, 1_500, 2_300_000, 1_250)] == [
        "999", "1.5k", "2.3M", "1.3k"]
    assert tool_label("bash", {"command": "rg  -n\n foo   src"}) == "bash `rg -n foo src`"
    assert tool_label("shell", {"cmd": "ls"}) == "shell `ls`"
    assert tool_label("read", {"path": "src/a.ts", "offset": 5}) == "read src/a.ts"
    assert tool_label("view", {"file_path": "b.ts"}) == "view b.ts"
    assert tool_label("grep", {"pattern": "foo|bar"}) == "grep `foo|bar`"
    assert tool_label("bash", {"command": "x" * 200}) == f"bash `{'x' * 79}…`"
    assert tool_label("mystery", {"n": 1}) == "mystery"


def test_31_removed_grep_chunks_name_their_files():
    files = [f"{c}.ts" for c in "abcdefgh"]
    text = grep_output(files, 5, 40)
    chunks = chunk_output(text, ChunkOptions(120, 300, 300))
    out = render_output(Source("g", "grep", {"pattern": "x"}, text), chunks, {0})
    assert out.text.split("\n")[-1] == (
        "[… 35 lines not shown: matches in b.ts, c.ts, d.ts, e.ts, f.ts and 2 more …]")
    assert out.text.split("\n")[0].startswith(f"{MARKER} The output of grep `x`, shortened: 5 of")


def test_32_read_omissions_map_to_file_lines_and_skip_the_read_note():
    text = lines(30)
    chunks = chunk_output(text, ChunkOptions(120, 300, 300))
    source = Source("r", "read", {"path": "src/big.ts", "offset": 101}, text)
    end0 = chunks[0].end
    expect = f"[… {30 - end0} lines not shown: lines {end0 + 101}–130 of src/big.ts …]"
    assert render_output(source, chunks, {0}).text.split("\n")[-1] == expect
    noted = text + "\n\n[Showing lines 101-130 of 400. Use offset=131 to continue.]"
    source = Source("r", "read", source.arguments, noted)
    out = render_output(source, chunk_output(noted, ChunkOptions(120, 300, 300)), {0})
    assert "–130 of src/big.ts …]" in out.text
    only_note = [Chunk(0, 0, 30, text), Chunk(1, 30, 32, noted.split("\n", 30)[-1])]
    assert render_output(source, only_note, {0}).text.endswith(text)


def test_33_a_removed_output_stub_names_call_size_and_recall():
    text = render_output(Source("z", "bash", {"command": "make"}, "m" * 2_000),
                         [Chunk(0, 0, 1, "m" * 2_000)], set()).text
    assert text.startswith(MARKER)
    for part in ("bash `make`", "1 line ", "2.0k chars", 'recall({"tool_call_id":"z"})'):
        assert part in text
