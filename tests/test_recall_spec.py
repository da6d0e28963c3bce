"""``recall``: upstream's numbered cases 34, 37 and 38 and the paging rules
of docs/distillation.md, "Recall", against :mod:`index.recall` and, for exchanges, through the
in-memory MCP client.

The wording of messages is this project's; the tests assert what they tell the model. Patterns
run on the ``regex`` module (Python syntax), not JavaScript.
"""

from __future__ import annotations

import context_paging.index.recall as recall
import pytest
from context_paging.index.model import ImageBlock
from context_paging.index.navigator import NavigatorError
from context_paging.index.recall import Recalled, recall_text
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

from tests.test_protocol import call, write_config

FOUR = "alpha\nbeta\ngamma\nalphabet"
TEN = "\n".join(f"line {n}" for n in range(1, 11))


def refused(code: str, text: str, **kwargs) -> str:
    with pytest.raises(NavigatorError) as caught:
        recall_text(text, **kwargs)
    assert caught.value.code == code
    return str(caught.value)


# --- 34: filtering by pattern ---------------------------------------------------------------------


def test_34_a_pattern_returns_the_matching_lines_numbered():
    assert recall_text(FOUR, pattern="^alpha") == Recalled("1: alpha\n4: alphabet")


def test_34_no_match_names_the_pattern_and_the_line_count():
    assert recall_text(FOUR, pattern="zzz") == Recalled(
        "No line of the original output (4 lines) matches /zzz/."
    )


def test_34_an_invalid_pattern_is_an_error_naming_it():
    assert refused("RECALL_PATTERN", FOUR, pattern="(").startswith("invalid pattern /(/: ")


# --- 37: regex safety -----------------------------------------------------------------------------


def test_37_a_pattern_that_backtracks_forever_returns_the_too_slow_error(monkeypatch):
    # Upstream's (a+)+$ does not backtrack in the regex module (next test); (a|a)+$ does.
    monkeypatch.setattr(recall, "PATTERN_SECONDS", 0.05)
    message = refused("RECALL_PATTERN", "a" * 40 + "!", pattern="(a|a)+$")
    assert message == "pattern /(a|a)+$/ took longer than 0.05 s; use a simpler one"


def test_37_upstreams_nested_quantifier_is_answered_rather_than_hanging():
    assert recall_text("a" * 40 + "!", pattern="(a+)+$") == Recalled(
        "No line of the original output (1 lines) matches /(a+)+$/."
    )


def test_37_a_pattern_over_500_characters_is_refused():
    message = refused("RECALL_PATTERN", FOUR, pattern="a" * 501)
    assert message == "pattern is 501 characters; the limit is 500"
    assert recall_text("a", pattern="a?" * 250) == Recalled("1: a")


def test_37_only_the_first_4000_characters_of_a_line_are_searched():
    assert recall_text("y" * 4_000 + "NEEDLE", pattern="NEEDLE").text.startswith("No line")
    ending_at_4000 = "y" * 3_994 + "NEEDLE" + "tail"
    assert recall_text(ending_at_4000, pattern="NEEDLE") == Recalled(f"1: {ending_at_4000}")


# --- paging ---------------------------------------------------------------------------------------


def test_8_everything_shown_at_once_has_no_note():
    assert recall_text(TEN) == Recalled(TEN)


def test_8_offset_and_limit_pick_lines_and_name_the_next_offset():
    assert recall_text(TEN, offset=3, limit=2) == Recalled(
        "line 3\nline 4\n\n[Showing lines 3–4 of 10. Use offset=5 to continue.]"
    )


def test_8_the_last_page_says_where_it_is_without_an_offset_past_the_end():
    # Upstream would still say "Use offset=11 to continue." here; that offset is an error.
    assert recall_text(TEN, offset=9) == Recalled("line 9\nline 10\n\n[Showing lines 9–10 of 10.]")


def test_8_with_a_pattern_offset_and_limit_count_matching_lines():
    text = "match 1\nother\nmatch 2\nother\nmatch 3"
    assert recall_text(text, pattern="match", offset=2, limit=1) == Recalled(
        "3: match 2\n\n[Showing matching lines 2–2 of 3. Use offset=3 to continue.]"
    )


def test_8_an_offset_past_the_end_is_an_error_naming_it_and_the_count():
    assert refused("RECALL_OFFSET", TEN, offset=11) == "offset 11 is beyond the end (10 lines)"
    assert refused("RECALL_OFFSET", FOUR, pattern="alpha", offset=3) == (
        "offset 3 is beyond the end (2 matching lines)"
    )


def test_8_at_most_2000_lines_go_out_per_call_whatever_the_limit():
    text = "\n".join(f"l{n}" for n in range(1, 2_501))
    first = "\n".join(f"l{n}" for n in range(1, 2_001))
    note = "\n\n[Showing lines 1–2000 of 2500. Use offset=2001 to continue.]"
    assert recall_text(text) == Recalled(first + note)
    assert recall_text(text, limit=5_000) == Recalled(first + note)
    rest = "\n".join(f"l{n}" for n in range(2_001, 2_501))
    assert recall_text(text, offset=2_001) == Recalled(
        rest + "\n\n[Showing lines 2001–2500 of 2500.]"
    )


def test_8_the_50kb_cap_stops_before_the_line_that_would_pass_it():
    line = "x" * 99  # 100 bytes with its newline: 512 lines are exactly 51,200 bytes
    assert recall_text("\n".join([line] * 600)) == Recalled(
        "\n".join([line] * 512) + "\n\n[Showing lines 1–512 of 600. Use offset=513 to continue.]"
    )


def test_8_a_line_that_would_pass_the_cap_after_others_waits_for_the_next_call():
    assert recall_text("short\n" + "é" * 30_000) == Recalled(
        "short\n\n[Showing lines 1–1 of 2. Use offset=2 to continue.]"
    )


def test_8_a_single_line_over_50kb_is_cut_at_a_character_boundary_with_a_note():
    text = "é" * 30_000 + "\nshort"  # 60,000 bytes; the cut keeps 51,199 bytes at most
    assert recall_text(text) == Recalled(
        "é" * 25_599 + "\n[line 1 cut at 50KB]"
        "\n\n[Showing lines 1–1 of 2. Use offset=2 to continue.]"
    )


def test_8_a_plain_recall_attaches_at_most_six_images_and_says_how_many_there_are():
    images = [ImageBlock("image/png", f"data{n}") for n in range(8)]
    assert recall_text("shot", images) == Recalled(
        "shot\n[8 image(s) in the original, 6 attached]", tuple(images[:6])
    )
    assert recall_text("shot", images[:2]) == Recalled("shot", tuple(images[:2]))


def test_8_with_a_pattern_or_offset_images_are_only_mentioned():
    images = [ImageBlock("image/png", "data")] * 2
    note = "\n[2 image(s) in the original; recall without pattern/offset to see them]"
    assert recall_text("shot", images, pattern="sh") == Recalled("1: shot" + note)
    assert recall_text("a\nb", images, offset=2) == Recalled(
        "b\n\n[Showing lines 2–2 of 2.]" + note
    )


def test_8_lone_surrogates_come_back_as_replacement_characters():
    assert recall_text("bad \ud800 x") == Recalled("bad \ufffd x")


# --- 38: an omitted exchange, recalled by the history id of its prompt ----------------------------

PROMPT = {"role": "user", "content": "Which clients retry?"}
SEARCH = {"role": "assistant", "stopReason": "toolUse", "content": [
    {"type": "text", "text": "Searching."},
    {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"command": "rg retry"}}]}
RESULT = {"role": "toolResult", "toolCallId": "c1", "toolName": "bash", "isError": False,
          "content": [{"type": "text", "text": "src/a.ts:3: retry(3)"}]}
SUBAGENT = {"role": "custom", "customType": "subagent", "content": "worker done", "display": True}
ANSWER = {"role": "assistant", "stopReason": "stop",
          "content": [{"type": "text", "text": "a.ts retries."}]}
STEERING = {"role": "user", "content": "Also check b.ts"}
NEXT = {"role": "user", "content": "Thanks. Next question."}

TRANSCRIPT = (
    "## user\nWhich clients retry?\n\n"
    "## assistant\nSearching.\n"
    '[tool call] bash {"command":"rg retry"}\n\n'
    "## tool result (bash)\nsrc/a.ts:3: retry(3)\n\n"
    "## assistant\na.ts retries."
)


@pytest.fixture
async def client(tmp_path):
    home = tmp_path / "home"
    write_config(home, {name: tmp_path / name for name in ("pi", "claude", "codex")})
    server = create_server(load_settings(home=home, environ={}))
    async with Client(server) as c:
        yield c
    server.history.close()


async def history_ids(client, session: str, messages: list[dict]) -> list[str]:
    error, _, _ = await call(client, "select_context",
                             {"session": session, "messages": messages, "format": "pi"})
    assert not error
    _, _, browsed = await call(client, "browse_history", {
        "direction": "forward", "count": 10, "session": f"ledger:{session}"})
    return [r["history_id"] for r in browsed["references"]]


@pytest.mark.anyio
async def test_38_an_exchange_comes_back_as_a_transcript_up_to_the_next_request(client):
    ids = await history_ids(client, "x38", [PROMPT, SEARCH, RESULT, SUBAGENT, ANSWER, NEXT])
    error, text, value = await call(client, "recall",
                                    {"history_id": ids[0], "session": "ledger:x38"})
    assert not error
    # Pi's custom messages are not history in this project, so no "## custom message" section.
    assert text == TRANSCRIPT
    assert value == {"text": TRANSCRIPT, "images": 0}


@pytest.mark.anyio
async def test_38_a_pattern_numbers_the_matching_transcript_lines(client):
    ids = await history_ids(client, "p38", [PROMPT, SEARCH, RESULT, SUBAGENT, ANSWER, NEXT])
    _, text, _ = await call(client, "recall",
                            {"history_id": ids[0], "pattern": "retr", "session": "ledger:p38"})
    # Upstream's lines 2, 5, 7, 11: here sections are separated by a blank line, no custom one.
    assert text == (
        "2: Which clients retry?\n"
        '6: [tool call] bash {"command":"rg retry"}\n'
        "9: src/a.ts:3: retry(3)\n"
        "12: a.ts retries."
    )


@pytest.mark.anyio
async def test_38_a_message_typed_while_the_agent_worked_stays_in_the_exchange(client):
    ids = await history_ids(client, "s38", [PROMPT, SEARCH, RESULT, STEERING, ANSWER, NEXT])
    _, text, _ = await call(client, "recall", {"history_id": ids[0], "session": "ledger:s38"})
    answer = "\n\n## assistant\na.ts retries."
    assert text == TRANSCRIPT.replace(answer, "\n\n## user\nAlso check b.ts" + answer)


@pytest.mark.anyio
async def test_38_a_model_turn_history_id_returns_that_turn_alone(client):
    ids = await history_ids(client, "t38", [PROMPT, SEARCH, RESULT, ANSWER, NEXT])
    _, text, _ = await call(client, "recall", {"history_id": ids[1], "session": "ledger:t38"})
    assert text == (
        '## assistant\nSearching.\n[tool call] bash {"command":"rg retry"}\n\n'
        "## tool result (bash)\nsrc/a.ts:3: retry(3)"
    )
