"""Builders and harnesses shared by the selector and distillation tests.

Two shapes of conversation are built here:

* **Pi messages**, as a host sends them to the selector (``user``, ``assistant``,
  ``tool_assistant`` …). ``FakeRaw`` plays the server's ledger for them and ``select`` is
  upstream's ``selected()`` helper with chars/4 estimates (docs/selection.md,
  "Upstream's test cases").
* **History entries**, ``(history id, message)`` pairs, as the distillation pass reads them
  (``user_entry`` …). The distillation tests import them as ``user``, ``assistant`` and
  ``result``, the names upstream's numbered cases use (docs/distillation.md, "Upstream's test
  cases"); their filler
  follows upstream's: lines of 60 chars, grep lines ``file:n:match yyy…``.

Builders used by one test file only stay in that file.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import pytest
from context_paging.paging.distill import DistillConfig
from context_paging.paging.distill.model import JudgeContext
from context_paging.paging.estimate import chars4_tokens, resident_chars4, text_chars4
from context_paging.paging.select import ContextSelectionError, CutKey, select_context
from context_paging.paging.units import tool_call_ids

# -- Pi messages for the selector ---------------------------------------------------------------

SYSTEM = "resident prompt"
TOOLS = [{"name": "read", "description": "Read files", "parameters": {"type": "object"}}]


def user(text, ts=0):
    return {"role": "user", "content": text, "timestamp": ts}


def custom(text):
    return {"role": "custom", "customType": "test-request", "content": text, "display": True}


def assistant(text, stop="stop"):
    return {"role": "assistant", "content": [{"type": "text", "text": text}], "stopReason": stop}


def call(call_id, name="read", path="src/file.ts"):
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": {"path": path}}


def tool_assistant(*calls, stop="toolUse"):
    return {"role": "assistant", "content": list(calls), "stopReason": stop}


def result(call_id, text, name="read"):
    content = [{"type": "text", "text": text}]
    return {"role": "toolResult", "toolCallId": call_id, "toolName": name, "content": content,
            "isError": False}


def repeat(marker, count):
    return f"{marker} {'x' * count}"


# -- the selector harness: the ledger and upstream's selected() ------------------------------

SAME = object()  # upstream's selected(): the target defaults to the budget (legacy budget-only)


@dataclass
class Item:
    id: str
    kind: str
    message: dict
    results: list = field(default_factory=list)


class FakeRaw:
    """Stored history as the server's ledger would answer for one request.

    ``entries`` are (history id, message) in stored order; like Pi's raw projection only user,
    assistant and toolResult messages count. Request messages map to ids by index through
    their content (upstream's exact-serialization match): ambiguous content has no key.
    """

    def __init__(self, messages, entries):
        self.messages, self.items = messages, []
        for history_id, message in entries:
            if message["role"] == "toolResult":
                self.items[-1].results.append(message)
            elif message["role"] in ("user", "assistant"):
                kind = "user" if message["role"] == "user" else "modelTurn"
                self.items.append(Item(history_id, kind, message))
        counts = Counter(item.id for item in self.items)
        self.unique = {item.id: item for item in self.items if counts[item.id] == 1}
        self.by_content, self.turn_of_call = {}, {}
        for item in self.items:
            self.by_content.setdefault(_canon(item.message), []).append(item.id)
            for call_id in tool_call_ids(item.message):
                self.turn_of_call[call_id] = item

    @classmethod
    def by_index(cls, messages, ids=None, outgoing=None):
        """Every persistent message stored, with id ``ids[i]`` or ``h{i}``."""
        ids, outgoing = ids or {}, outgoing or [False] * len(messages)
        return cls(messages, [(ids.get(i, f"h{i}"), m) for i, m in enumerate(messages)
                              if not outgoing[i]])

    def key_of(self, index):
        message = self.messages[index]
        ids = self.by_content.get(_canon(message), [])
        if message["role"] not in ("user", "assistant") or len(ids) != 1:
            return None
        if ids[0] not in self.unique:
            return None
        calls = tool_call_ids(message)
        return CutKey(ids[0], calls[0] if calls else None)

    def resolves(self, frontier):
        anchor = self.unique.get(frontier.last_evicted.history_id)
        if anchor is None:
            return False
        call_id = frontier.last_evicted.tool_call_id
        if call_id is not None and call_id not in tool_call_ids(anchor.message):
            return False
        if frontier.kind != "partialTurn":
            return True
        owner = self.unique.get(frontier.user_history_id) if frontier.user_history_id else None
        return anchor.kind == "modelTurn" and (
            frontier.user_history_id is None or (owner is not None and owner.kind == "user"))

    def is_last_item(self, index):
        calls = tool_call_ids(self.messages[index])
        turn = next((self.turn_of_call[c] for c in calls if c in self.turn_of_call), None)
        if turn is None or turn is not self.items[-1]:
            return False
        results = []
        for message in self.messages[index + 1:]:
            if message["role"] != "toolResult":
                break
            results.append(message["toolCallId"])
        return (tool_call_ids(turn.message) == calls
                and [r["toolCallId"] for r in turn.results] == results)

    def tool_reference(self, index):
        message = self.messages[index]
        turn = self.turn_of_call.get(message["toolCallId"])
        if turn is None or all(r["toolCallId"] != message["toolCallId"] for r in turn.results):
            return None
        return turn.id, message["toolCallId"], message["toolName"]


def _canon(message):
    return json.dumps(message, sort_keys=True)


def select(messages, *, budget=64_000, target=SAME, window=100_000, system=SYSTEM, tools=TOOLS,
           **options):
    """Upstream's ``selected()`` helper: chars/4 estimates, target = budget unless given."""
    return select_context(
        messages, token_budget=budget, trim_to_tokens=budget if target is SAME else target,
        model_window=window, resident_tokens=resident_chars4(system, tools),
        estimates=[chars4_tokens(m) for m in messages], notice_tokens=text_chars4, **options)


def window(messages, selection):
    """The window the caller would send: notice first, recovery replacements applied."""
    out = [] if selection.notice is None else [user(selection.notice)]
    for i in selection.indexes:
        text = selection.replacements.get(i)
        content = [{"type": "text", "text": text}]
        out.append(messages[i] if text is None else {**messages[i], "content": content})
    return out


def sent_text(messages, selection):
    """The sent window as JSON, for marker checks (``messages`` may be a cut fixture)."""
    messages = getattr(messages, "messages", messages)
    return json.dumps(window(messages, selection), ensure_ascii=False)


def raises(code, function, *args, **kwargs):
    with pytest.raises(ContextSelectionError) as caught:
        function(*args, **kwargs)
    assert caught.value.code == code
    return caught.value


# -- history entries and judges for the distillation pass --------------------------------------

CONFIG = DistillConfig()


def lines(count: int, prefix: str = "line", width: int = 60) -> str:
    return "\n".join(f"{prefix} {i + 1} ".ljust(width, "x") for i in range(count))


def grep_output(files: list[str], per_file: int, width: int = 60) -> str:
    return "\n".join(f"{f}:{i + 1}:" + "match ".ljust(width, "y") for f in files
                     for i in range(per_file))


PAD = lines(40, "detail")


def user_entry(text, hid):
    return hid, {"role": "user", "content": [{"type": "text", "text": text}]}


def assistant_entry(text, hid, calls=(), stop=None):
    content = ([{"type": "text", "text": text}] if text else []) + [
        {"type": "toolCall", "id": c, "name": n, "arguments": a} for c, n, a in calls]
    return hid, {"role": "assistant", "content": content,
                 "stopReason": stop or ("toolUse" if calls else "stop")}


def result_entry(call_id, tool, text, hid, error=False):
    return hid, {"role": "toolResult", "toolCallId": call_id, "toolName": tool,
                 "content": [{"type": "text", "text": text}], "isError": error}


def run_end(outputs, answer="Done.", follow="next"):
    """u0, one assistant calling every output's tool, the results, the answer, a new prompt."""
    calls = [(f"c{i}", tool, args) for i, (tool, args, _) in enumerate(outputs)]
    return [user_entry("Please look", "u0"), assistant_entry("", "a0", calls),
            *(result_entry(f"c{i}", t, text, f"r{i}") for i, (t, _, text) in enumerate(outputs)),
            assistant_entry(answer, "a1"), user_entry(follow, "u1")]


def retry_session():
    """Five runs after a compaction: u1 and u5 ask about retry clients, u2–u4 about other work."""
    u, a, r = user_entry, assistant_entry, result_entry
    return [("cmp", {"role": "compactionSummary", "summary": "earlier work"}),
            u("Which clients retry?", "u1"),
            a("Searching.", "a1", [("c1", "bash", {"command": "rg retry"})]),
            r("c1", "bash", lines(20), "r1"),
            a(f"jobStatus and orderStatus.\n{PAD}", "a1b"),
            ("notice", {"role": "custom", "content": "subagent finished"}),
            u("Draft a README paragraph.", "u2"), a(f"Here it is: …\n{PAD}", "a2"),
            u("Count the 500s in the log.", "u3"),
            a("", "a3", [("c3", "bash", {"command": "grep -c 500 log"})]),
            r("c3", "bash", "12", "r3"), a(f"12 lines.\n{PAD}", "a3b"),
            u("Where is StatusBadge used?", "u4"), a(f"In 5 files.\n{PAD}", "a4"),
            u("Back to the retry clients: which also retry on 502?", "u5"),
            a("", "a5", [("c5", "bash", {"command": "rg 502"})]),
            r("c5", "bash", lines(5), "r5")]


def judged_run(small_texts):
    """retry_session() finished (a5b answers), u6 asks next; run 5 also made small outputs."""
    entries = retry_session()
    calls = [(f"s{i + 1}", tool, args) for i, (tool, args, _) in enumerate(small_texts)]
    entries += [assistant_entry("", "a5s", calls),
                *(result_entry(f"s{i + 1}", t, x, f"rs{i + 1}") for i, (t, _, x) in
                  enumerate(small_texts)),
                assistant_entry("jobStatus also retries on 502.", "a5b"),
                user_entry("Thanks, now 503?", "u6")]
    return entries


class Fixed:
    """A judge answering from a function of (context, chunk)."""

    def __init__(self, score, name="fake"):
        self.score, self.name = score, name

    def judge(self, question, chunks, context):
        return {c.index: self.score(context, c) for c in chunks}


FIRST_CHUNK = Fixed(lambda ctx, c: 1.0 if c.index == 0 else 0.0)


def judge_context(**kw):
    """The judge's context for one bash output at run end; ``kw`` overrides a field."""
    base = dict(kind="output", phase="run-end", labels=("bash `cat x`",), superseded=("",),
                failed=(False,), tool="bash", arguments='{"command":"cat x"}', total_lines=30)
    return JudgeContext(**(base | kw))
