"""The tolerant JSONL reader: pending lines, glued objects, surrogates, damage, growth."""

from __future__ import annotations

import json

import pytest
from context_paging.index import jsonl
from context_paging.index.jsonl import FileCursor, read_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import (
    ALL_FIXTURES,
    ALL_SAMPLES,
    HAVE_RECORDED,
    fixture,
    halfway,
    recorded,
    sample,
)


def write(tmp_path, data: bytes, name: str = "s.jsonl"):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_a_partial_last_line_is_pending_and_read_once_complete(tmp_path):
    path = write(tmp_path, b'{"a": 1}\n{"b": ')
    first = read_jsonl(path)
    assert [r.value for r in first.records] == [{"a": 1}]
    assert first.pending and first.issues == []
    assert first.end == len(b'{"a": 1}\n') and first.next_line == 2
    with open(path, "ab") as handle:
        handle.write(b'2}\n{"c": 3}\n')
    second = read_jsonl(path, first.end, first.next_line)
    assert [(r.line, r.value) for r in second.records] == [(2, {"b": 2}), (3, {"c": 3})]
    assert not second.pending


def test_a_complete_object_without_newline_is_accepted(tmp_path):
    path = write(tmp_path, b'{"a": 1}\n{"b": 2}')
    chunk = read_jsonl(path)
    assert [r.value for r in chunk.records] == [{"a": 1}, {"b": 2}]
    assert not chunk.pending


def test_glued_objects_on_one_line_are_both_recovered(tmp_path):
    path = write(tmp_path, b'{"a": 1}{"b": 2}\n{"c": 3}\n')
    chunk = read_jsonl(path)
    expected = [(1, {"a": 1}), (1, {"b": 2}), (2, {"c": 3})]
    assert [(r.line, r.value) for r in chunk.records] == expected
    assert [i.kind for i in chunk.issues] == ["glued_objects"]


@recorded
def test_the_glued_line_of_the_real_pi_fixture_yields_two_objects():
    path = fixture("pi-v1-real-compaction-with-concatenated-line.jsonl")
    chunk = read_jsonl(str(path))
    on_440 = [r for r in chunk.records if r.line == 440]
    assert len(on_440) == 2
    assert all(r.value.get("type") == "message" for r in on_440)
    assert not [i for i in chunk.issues if i.kind == "bad_json"]


@pytest.mark.parametrize("key, line", [("pi-v1", 19), ("codex-modern", 31)])
def test_the_glued_line_of_a_sample_yields_two_objects(key, line):
    chunk = read_jsonl(str(sample(key)))
    glued = [r for r in chunk.records if r.line == line]
    assert len(glued) == 2 and glued[0].offset == glued[1].offset
    assert [(i.kind, i.line) for i in chunk.issues] == [("glued_objects", line)]


def test_the_partial_last_line_of_the_pi_v1_sample_is_pending():
    data = sample("pi-v1").read_bytes()
    chunk = read_jsonl(str(sample("pi-v1")))
    assert chunk.pending and chunk.end == data.rindex(b"\n") + 1
    assert max(r.line for r in chunk.records) == 21


def test_garbage_is_a_warning_with_line_and_byte_offset(tmp_path):
    path = write(tmp_path, b'{"a": 1}\nnot json at all\n{"b": 2} trailing\n[1, 2]\n{"c": 3}\n')
    chunk = read_jsonl(path)
    assert [r.value for r in chunk.records] == [{"a": 1}, {"b": 2}, {"c": 3}]
    kinds = [(i.kind, i.line) for i in chunk.issues]
    assert kinds == [("bad_json", 2), ("bad_json", 3), ("not_an_object", 4)]
    bad = chunk.issues[0]
    assert bad.offset == len(b'{"a": 1}\n') and bad.file == path
    assert chunk.issues[1].offset == len(b'{"a": 1}\nnot json at all\n') + len(b'{"b": 2} ')


def test_lone_surrogates_and_invalid_utf8_survive_as_replacement_characters(tmp_path):
    path = write(tmp_path, b'{"t": "a\\ud800b"}\n{"u": "caf\xe9 \xff"}\n{"ok": "\\ud83d\\ude00"}\n')
    chunk = read_jsonl(path)
    values = [r.value for r in chunk.records]
    assert values[0] == {"t": "a\ufffdb"}
    assert values[1]["u"].startswith("caf") and "\ufffd" in values[1]["u"]
    assert values[2] == {"ok": "\U0001F600"}
    for value in values:
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # writable anywhere


def test_a_lone_surrogate_the_ledger_wrote_is_read_back_exactly():
    line = jsonl.dump_line({"x": "a\ud800b"})  # the json module's bytes: orjson refuses it
    assert b"\xed\xa0\x80" in line
    assert jsonl.parse_line(line, "p", 1, 0) == ([{"x": "a\ud800b"}], [])


def json_module_reading(monkeypatch, raw: bytes):
    """What :func:`parse_line` gives with the json module alone (orjson not installed)."""
    with monkeypatch.context() as patched:
        patched.setattr(jsonl, "orjson", None)
        return jsonl.parse_line(raw, "p", 1, 0)


_NUMBERS = st.one_of(
    st.integers(min_value=-(1 << 70), max_value=1 << 70),
    st.sampled_from([1 << 63, (1 << 63) - 1, -(1 << 63), -(1 << 63) - 1, (1 << 64) - 1, 1 << 64]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.floats(min_value=9e18, max_value=1e20),
)
_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_VALUES = st.recursive(
    st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(_TEXT, inner, max_size=4)),
    max_leaves=12)
# Bytes the json module reads in its own way, spliced into a written line
_ODD = st.sampled_from([b"\\ud800", b"\xed\xa0\x80", b"\xff", b"NaN", b"1e400", b"\xef\xbb\xbf",
                        b"123456789012345678901234567890", b"-0", b"-0.0", b"1E5", b"{}", b" "])


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_VALUES, st.lists(st.tuples(st.integers(min_value=0), _ODD), max_size=2),
       st.booleans())
def test_every_line_is_read_as_the_json_module_reads_it(monkeypatch, value, splices, spaced):
    raw = (json.dumps({"v": value}, ensure_ascii=False) if spaced
           else json.dumps({"v": value}, separators=(",", ":"))).encode("utf-8", "surrogatepass")
    for at, odd in splices:  # also where it breaks the line: the two must break alike
        at %= len(raw) + 1
        raw = raw[:at] + odd + raw[at:]
    raw += b"\n"
    expected = json_module_reading(monkeypatch, raw)
    got = jsonl.parse_line(raw, "p", 1, 0)
    assert repr(got) == repr(expected)
    assert [type(v) for v in got[0]] == [type(v) for v in expected[0]]


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.floats(min_value=1e-300, max_value=1e300), st.integers(min_value=0, max_value=1200),
       st.booleans())
def test_long_numbers_at_a_halfway_point_are_read_as_the_json_module_reads_them(
        monkeypatch, value, zeros, negative):
    number = (b"-" if negative else b"") + halfway(value, zeros)
    raw = b'{"x":' + number + b',"note":"made by hand"}\n'
    assert repr(jsonl.parse_line(raw, "p", 1, 0)) == repr(json_module_reading(monkeypatch, raw))


def test_a_long_run_of_digits_is_found_wherever_the_samples_fall():
    # every offset against the sampling stride, runs just shorter and just longer than the
    # length looked for, with and without digits scattered around them
    for offset in range(jsonl._STRIDE + 1):
        for run in (jsonl._LONG_RUN - 1, jsonl._LONG_RUN, jsonl._LONG_RUN + 1, 3 * jsonl._LONG_RUN):
            for before, after in ((b"x", b"x"), (b"1x", b"x1")):  # digits near, not touching
                raw = (before * offset)[len(before * offset) - offset:] + b"5" * run + after * 150
                expected = run >= jsonl._LONG_RUN
                assert jsonl._long_digit_run(raw) is expected, (offset, run, before)
                assert jsonl._long_digit_run(memoryview(raw)) is expected


def test_a_number_orjson_would_round_the_other_way_is_read_by_json():
    raw = b'{"x":1017554834493971.5625' + b"0" * 749 + b"}\n"
    assert jsonl.parse_line(raw, "p", 1, 0) == ([{"x": 1017554834493971.5}], [])


def test_nesting_too_deep_for_the_json_module_is_one_issue_not_an_exception(tmp_path):
    deep = b'{"a":' + b"[" * 5000 + b"]" * 5000 + b"}\n"
    path = write(tmp_path, b'{"ok": 1}\n' + deep + b'{"ok": 2}\n' + deep.rstrip(b"\n"))
    chunk = read_jsonl(path)
    assert [r.value for r in chunk.records] == [{"ok": 1}, {"ok": 2}]
    assert [(i.line, i.offset, i.kind) for i in chunk.issues] == [(2, 10, "bad_json")]
    assert "nested too deeply" in chunk.issues[0].message
    assert chunk.pending  # the unterminated deep last line waits, as any unreadable tail does
    # within orjson's 1,024 levels the line is read, past the json module's own reach
    nested = b"[" * 1000 + b"]" * 1000
    values, issues = jsonl.parse_line(b'{"a":' + nested + b"}\n", "p", 1, 0)
    depth, inner = 0, values[0]["a"]
    while inner:
        depth, inner = depth + 1, inner[0]
    assert issues == [] and depth == 999  # the innermost list is empty


def test_an_unterminated_last_line_reads_surrogate_escapes_as_a_complete_line_does(tmp_path):
    path = write(tmp_path, b'{"a": "x"}\n{"b": "y\\ud800z"}')
    chunk = read_jsonl(path)
    assert [r.value for r in chunk.records] == [{"a": "x"}, {"b": "y\ufffdz"}]


def test_the_cursor_parses_only_appended_bytes(tmp_path):
    path = write(tmp_path, b'{"a": 1}\n')
    cursor = FileCursor(path)
    first, restarted = cursor.read()
    assert restarted and first.bytes_parsed == 9
    with open(path, "ab") as handle:
        handle.write(b'{"b": 2}\n')
    second, restarted = cursor.read()
    assert not restarted
    assert second.bytes_parsed == 9 and [r.value for r in second.records] == [{"b": 2}]
    assert cursor.bytes_parsed_total == 18


def test_the_cursor_rereads_a_file_that_shrank_or_changed_its_first_line(tmp_path):
    path = write(tmp_path, b'{"a": 1}\n{"b": 2}\n')
    cursor = FileCursor(path)
    cursor.read()
    write(tmp_path, b'{"a": 1}\n')
    shrunk, restarted = cursor.read()
    assert restarted and [r.value for r in shrunk.records] == [{"a": 1}]
    write(tmp_path, b'{"z": 0}\n{"b": 2}\n{"c": 3}\n')
    rewritten, restarted = cursor.read()
    assert restarted and [r.value for r in rewritten.records] == [{"z": 0}, {"b": 2}, {"c": 3}]


# --- property: damage never raises and never hides complete lines before it -------------------

_SAMPLES = {p.name: p.read_bytes()[:60_000]
            for p in [*ALL_SAMPLES, *(ALL_FIXTURES if HAVE_RECORDED else [])]}


def _complete_lines(data: bytes, limit: int) -> int:
    """How many lines of ``data`` end with a newline strictly before byte ``limit``."""
    return data[:limit].count(b"\n")


@st.composite
def damaged(draw):
    name = draw(st.sampled_from(sorted(_SAMPLES)))
    data = _SAMPLES[name]
    at = draw(st.integers(0, len(data)))
    kind = draw(st.sampled_from(["truncate", "corrupt", "glue", "insert_garbage"]))
    if kind == "truncate":
        damaged_data = data[:at]
    elif kind == "corrupt":
        junk = draw(st.binary(min_size=1, max_size=12))
        damaged_data = data[:at] + junk + data[at + len(junk):]
    elif kind == "glue":
        other = _SAMPLES[draw(st.sampled_from(sorted(_SAMPLES)))]
        damaged_data = data[:at].rstrip(b"\n") + other
        at = len(data[:at].rstrip(b"\n"))
    else:
        damaged_data = data[:at] + draw(st.binary(max_size=40)) + data[at:]
    return data, damaged_data, at


TMP_OK = [HealthCheck.function_scoped_fixture]


@settings(max_examples=150, deadline=None, suppress_health_check=TMP_OK)
@given(damaged())
def test_damaged_files_never_raise_and_keep_every_complete_line_before_the_damage(tmp_path, case):
    original, data, at = case
    baseline = read_jsonl(write(tmp_path, original, "original.jsonl"))
    chunk = read_jsonl(write(tmp_path, data, "damaged.jsonl"))
    intact = _complete_lines(original, at)
    before = [(r.line, r.offset, r.value) for r in baseline.records if r.line <= intact]
    after = [(r.line, r.offset, r.value) for r in chunk.records if r.line <= intact]
    assert after == before


@settings(max_examples=60, deadline=None, suppress_health_check=TMP_OK)
@given(damaged())
def test_damaged_session_files_load_into_history_without_an_exception(tmp_path, case):
    from context_paging.index.sessions import UnknownFormat, load

    _, data, _ = case
    session = load(write(tmp_path, data, "damaged-session.jsonl"))
    try:
        items = session.projection.items
    except UnknownFormat:
        return  # nothing recognisable is left of the file: a clear error, not a crash
    assert all(item.history_id for item in items)
