"""A host agent loop over context-paging, with a scripted model: no network, no API key.

What a host does (docs/host-protocol.md):

1. keep the **full** conversation, in Anthropic Messages format, and never trim it itself;
2. before **every** model request, send it to ``select_context`` and send the model only the
   window that comes back (old turns replaced by a short paging notice once over budget);
3. register the recovery tools next to its own tools, and when the model calls one, run it
   through the same MCP client and append the tool_use / tool_result exchange as usual.

The "model" here is a small script (:class:`ScriptedModel`) that, like a real model, sees only the
window it is sent. Over eight requests (~17 model calls) a debugging session reads large files and
logs under an 8,000-token budget, so early turns page out. The last request asks for the exact
failure line of the first test run: the model finds it missing from its window, calls
``search_history`` and then ``recall``, and quotes the line exactly.

Run it: ``python examples/agent_loop.py`` (a short transcript on stdout). Tests call
:func:`main` with a temporary home and inspect what it returns.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from mcp import Client

SESSION = "example-agent-loop"  # the ledger id of this conversation
BUDGET = 8_000  # tokens per request: small, so paging shows within a few turns
SYSTEM = "You are a coding agent fixing the nightly build of the shop service in /srv/shop."
RECOVERY_TOOLS = ("search_history", "browse_history", "load_history", "read_context_output",
                  "recall")

# The one detail the last request needs. It appears only in the first tool output.
FAILURE_LINE = ("FAILED tests/test_refund.py::test_partial_refund - AssertionError: refund total "
                "41.99 != 42.00 (seed=81723, order=ORD-5521)")

Message = dict[str, Any]
Echo = Callable[[str], None]


# --- the workspace: the host's own tools, with large deterministic outputs ----------------------

WORKSPACE_TOOLS = [
    {"name": "run_tests", "description": "Run pytest on a path and return its output.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                      "required": ["path"]}},
    {"name": "read_file", "description": "Return a file's contents.",
     "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                      "required": ["path"]}},
    {"name": "grep", "description": "Search the repository for a pattern.",
     "input_schema": {"type": "object", "properties": {"pattern": {"type": "string"}},
                      "required": ["pattern"]}},
]


def run_workspace_tool(name: str, arguments: dict[str, Any]) -> str:
    if name == "run_tests":
        return _test_run()
    if name == "grep":
        pattern = arguments["pattern"]
        return "\n".join(f"shop/module_{i // 8}.py:{10 + i * 7}:    total = {pattern}amount_{i}, 2)"
                         for i in range(260))
    return _source_file(arguments["path"])


def _test_run() -> str:
    lines = ["=" * 29 + " test session starts " + "=" * 30,
             "platform linux -- Python 3.11.7, pytest-8.3.3", "collected 312 items", ""]
    for i in range(311):
        lines.append(f"tests/test_{('cart', 'orders', 'tax', 'stock')[i % 4]}.py::"
                     f"test_case_{i:03d} PASSED{'':<30}[{i * 100 // 312:>3}%]")
    lines += ["tests/test_refund.py::test_partial_refund FAILED" + " " * 24 + "[100%]", "",
              "=" * 35 + " FAILURES " + "=" * 35,
              "_" * 28 + " test_partial_refund " + "_" * 29,
              "    def test_partial_refund(order_factory):",
              ">       assert refund.total == Money('42.00')",
              "E       AssertionError: refund total 41.99 != 42.00", "",
              "=" * 27 + " short test summary info " + "=" * 28,
              FAILURE_LINE,
              "=" * 24 + " 1 failed, 311 passed in 48.21s " + "=" * 24]
    return "\n".join(lines)


def _source_file(path: str) -> str:
    stem = Path(path).stem
    lines = [f'"""{path}"""', "", "from decimal import Decimal", ""]
    for i in range(90):
        lines += [f"def {stem}_step_{i}(amount: Decimal, rate: Decimal) -> Decimal:",
                  f"    # step {i} of the {stem} pipeline",
                  "    return round(amount * rate, 2)", ""]
    return "\n".join(lines)


# --- the scripted model: sees only the window, answers by a fixed plan ---------------------------

# (request, workspace tool call, answer once the tool output is in)
PLAN: list[tuple[str, tuple[str, dict[str, Any]], str]] = [
    ("The nightly build is red. Run the tests and tell me what fails.",
     ("run_tests", {"path": "tests/"}),
     "One failure: test_partial_refund in tests/test_refund.py (a rounding assertion); 311 pass."),
    ("Show me the refund module.", ("read_file", {"path": "shop/refund.py"}),
     "refund.py rounds every line item before summing."),
    ("Where else do we round money?", ("grep", {"pattern": "round("}),
     "260 call sites round per item, all with two decimals."),
    ("Read the money helpers.", ("read_file", {"path": "shop/money.py"}),
     "money.py has no helper that rounds a total once; each caller rounds itself."),
    ("And the tax code?", ("read_file", {"path": "shop/tax.py"}),
     "tax.py also rounds per line, so refunds and taxes drift by a cent."),
    ("Check the gateway client too.", ("read_file", {"path": "shop/gateway.py"}),
     "The gateway sends the already-rounded total; it is not the cause."),
    ("Look at the order model.", ("read_file", {"path": "shop/orders.py"}),
     "Orders keep exact Decimals; only refunds and taxes round early."),
]
REPORT_REQUEST = ("Write the bug report. Quote the exact failure line of the first test run, "
                  "seed included, so anyone can reproduce it.")


class ScriptedModel:
    """Plays the model. It reads nothing but the window it is sent, like a real one."""

    def __init__(self) -> None:
        self.windows: list[list[Message]] = []  # every window it was sent, for the tests
        self._ids = 0

    def respond(self, window: list[Message]) -> Message:
        self.windows.append(window)
        last = window[-1]
        results = [b for b in _blocks(last) if b.get("type") == "tool_result"]
        if not results:
            return self._start(_request_text(last))
        calls = {b["id"]: b for b in _blocks(window[-2]) if b.get("type") == "tool_use"}
        call, result = calls[results[0]["tool_use_id"]], results[0]
        return self._continue(_request_in(window), call["name"], _text(result))

    def _start(self, request: str) -> Message:
        for asked, (tool, arguments), _ in PLAN:
            if request == asked:
                return self._call(tool, arguments, "Let me look.")
        if request == REPORT_REQUEST:
            visible = "\n".join(_text(m) for m in self.windows[-1])
            if "FAILED tests/" in visible:  # still in the window: no recovery needed
                return self._say(f"Failing: {_failure_in(visible)}")
            return self._call("search_history", {"query": "test_partial_refund FAILED seed"},
                              "The first test run has left my context; searching history.")
        return self._say("I am not sure what you mean.")

    def _continue(self, request: str, tool: str, output: str) -> Message:
        if tool == "search_history":
            hits = json.loads(output)["references"]
            turn = next(h for h in hits if "run_tests" in h["tools"])
            return self._call("recall", {"history_id": turn["history_id"], "pattern": "^FAILED "},
                              "Found the test run; recalling its failure line exactly.")
        if tool == "recall":
            return self._say(f"Bug report: partial refunds round per line item.\n\n"
                             f"    {_failure_in(output)}")
        return self._say(next(answer for asked, _, answer in PLAN if asked == request))

    def _call(self, name: str, arguments: dict[str, Any], text: str) -> Message:
        self._ids += 1
        return {"role": "assistant", "content": [
            {"type": "text", "text": text},
            {"type": "tool_use", "id": f"toolu_{self._ids:02d}", "name": name, "input": arguments},
        ]}

    @staticmethod
    def _say(text: str) -> Message:
        return {"role": "assistant", "content": [{"type": "text", "text": text}]}


def _blocks(message: Message) -> list[dict[str, Any]]:
    content = message.get("content")
    return content if isinstance(content, list) else []


def _text(message: Message) -> str:
    """The text of a message or of a tool_result block, tool output included."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(_text(b) if b.get("type") == "tool_result" else b.get("text", "")
                     for b in content or () if b.get("type") in ("text", "tool_result"))


def _request_in(window: list[Message]) -> str:
    """The user request the model is working on: the newest user message that is not tool
    output (a user message of only tool_result blocks is output, not a request)."""
    for message in reversed(window):
        if message["role"] == "user" and not any(
            b.get("type") == "tool_result" for b in _blocks(message)
        ):
            return _request_text(message)
    raise ValueError("no user request in the window")


def _request_text(message: Message) -> str:
    """A request's own words: its last text block (a paging notice, when there is one, is
    merged into the window's first user message as a text block before the request)."""
    texts = [message["content"]] if isinstance(message["content"], str) else [
        b["text"] for b in _blocks(message) if b.get("type") == "text"]
    return texts[-1] if texts else ""


def _failure_in(text: str) -> str:
    """The FAILED line in ``text``, without recall's line-number prefix."""
    start = text.index("FAILED tests/")
    end = text.find("\n", start)
    return text[start:] if end < 0 else text[start:end]


# --- the host loop --------------------------------------------------------------------------------


class Host:
    def __init__(self, client: Client, tools: list[dict[str, Any]], echo: Echo) -> None:
        self.client = client
        self.tools = tools  # what the model is offered: the workspace's and the recovery tools
        self.echo = echo
        self.model = ScriptedModel()
        self.conversation: list[Message] = []  # the full history; select_context pages it
        self.selections: list[dict[str, Any]] = []
        self.recoveries: list[dict[str, Any]] = []

    async def ask(self, request: str) -> str:
        """One user request, run until the model answers without calling a tool."""
        self.echo(f"\nuser: {request}")
        self.conversation.append({"role": "user", "content": request})
        while True:
            window = await self.select()
            reply = self.model.respond(window)
            self.conversation.append(reply)
            calls = [b for b in reply["content"] if b["type"] == "tool_use"]
            if not calls:
                self.echo(f"model: {_text(reply)}")
                return _text(reply)
            results = [await self.run_tool(call) for call in calls]
            self.conversation.append({"role": "user", "content": results})

    async def select(self) -> list[Message]:
        result = await self.client.call_tool("select_context", {
            "session": SESSION, "messages": self.conversation, "format": "anthropic",
            "system": SYSTEM, "tools": self.tools, "token_budget": BUDGET,
        })
        if result.is_error:
            raise RuntimeError(_content_text(result))
        reply = result.structured_content
        self.selections.append(reply)
        self.echo(f"  [select_context: {reply['mode']}, sending {len(reply['messages'])} of "
                  f"{len(self.conversation)} messages, ~{reply['estimated_tokens']:,.0f} of "
                  f"{reply['budget_tokens']:,.0f} tokens]")
        return reply["messages"]

    async def run_tool(self, call: dict[str, Any]) -> dict[str, Any]:
        name, arguments = call["name"], call["input"]
        self.echo(f"  model calls {name}({json.dumps(arguments)})")
        is_error = False
        if name in RECOVERY_TOOLS:
            result = await self.client.call_tool(name, arguments)
            text, is_error = _content_text(result), bool(result.is_error)
            self.recoveries.append({"name": name, "input": arguments, "text": text,
                                    "is_error": is_error})
            self.echo("    → " + text[:150].replace("\n", " ⏎ ") + ("…" if len(text) > 150 else ""))
        else:
            text = run_workspace_tool(name, arguments)
            self.echo(f"    → {len(text):,} characters of output")
        block = {"type": "tool_result", "tool_use_id": call["id"], "content": text}
        return {**block, "is_error": True} if is_error else block


def _content_text(result: Any) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def run(home: Path, echo: Echo) -> dict[str, Any]:
    # A hermetic server: this home only, no agent session folders, no environment overrides.
    nowhere = str(home / "no-sessions")
    settings = load_settings(home=home, environ={}, overrides={
        "sources.pi": nowhere, "sources.claude_code": nowhere, "sources.codex": nowhere})
    server = create_server(settings)
    try:
        async with Client(server) as client:
            listed = (await client.list_tools()).tools
            recovery = [{"name": t.name, "description": t.description,
                         "input_schema": t.input_schema}
                        for t in listed if t.name in RECOVERY_TOOLS]
            host = Host(client, WORKSPACE_TOOLS + recovery, echo)
            for request, _, _ in PLAN:
                await host.ask(request)
            answer = await host.ask(REPORT_REQUEST)
    finally:
        server.history.close()  # type: ignore[attr-defined]
    return {"answer": answer, "detail": FAILURE_LINE, "conversation": host.conversation,
            "selections": host.selections, "windows": host.model.windows,
            "recoveries": host.recoveries}


def main(home: Path, echo: Echo | None = None) -> dict[str, Any]:
    """Run the whole session against a server whose data lives in ``home``."""
    return anyio.run(run, home, echo or (lambda _line: None))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="context-paging-example-") as tmp:
        outcome = main(Path(tmp), echo=print)
    exact = outcome["detail"] in outcome["answer"]
    print(f"\nThe answer quotes the evicted line exactly: {'yes' if exact else 'NO'}")
    sys.exit(0 if exact else 1)
