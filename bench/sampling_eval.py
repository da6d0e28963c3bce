"""The ``sampling`` judge end to end on the session fixtures, with a scripted host model.

Every finished run of every fixture session (bench/fixture_eval.py) is sent, run end by run
end, through ``select_context`` over MCP (the in-memory ``Client``, 2026-07-28 era) with
``[distill] judge = "sampling"``. The client's sampling callback plays the host's model. No
real model runs here (no network), so the script is an **oracle**: it answers each prompt with
exactly the chunks or items that hold a line the fixture labels call needed, read from the
prompt's own text. What this measures is therefore not a model's judgment but everything
around it on real data:

* the plumbing — prompts built, sent in the SDK's resolver slots, parsed, decided, applied —
  with the same labels as the local judge's table, so the two rows compare directly: the
  oracle's row is the best any judge can do with chunk-level decisions under the same rules
  (60 % keep limit, superseded outputs, exchanges kept);
* the cost a host pays: prompts per run end, prompt sizes in characters and cl100k tokens, and
  the wall time of ``select_context`` with sampling against the same calls with the local
  judge, measured side by side in one run (the scripted model answers instantly, so the
  difference is the server's own overhead plus one extra round trip per call).

    python -m bench.sampling_eval [--fixtures DIR] [--concurrency 6]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import anyio
from context_paging.paging.distill import Decision
from context_paging.paging.distill.conversation import Entry, text_of
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import create_server
from context_paging.server.tokens import text_counter
from mcp import Client
from mcp.types import CreateMessageResult, TextContent

from bench.fixture_eval import (
    FIXTURES,
    Scored,
    evaluate,
    label_session,
    report,
    run_end_prefixes,
    session_entries,
)
from bench.recorded import ENV, require

_PIECE = re.compile(r"^\[(chunk|item|exchange) (\d+)\](?: \(.*\))?\n", re.MULTILINE)
MIN_LINE = 4  # needed lines shorter than this ("}", "") would match anywhere
REFUSED: list[str] = []


class Oracle:
    """Answers with the numbers of the pieces that hold a needed line."""

    def __init__(self, needed_lines: set[str]) -> None:
        self.needed = needed_lines
        self.prompts: list[str] = []

    async def __call__(self, context, params) -> CreateMessageResult:
        prompt = params.messages[0].content.text
        self.prompts.append(prompt)
        parts = _PIECE.split(prompt.rsplit("\n\n## Task\n", 1)[0])
        keep = []
        for kind, number, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
            if kind == "exchange" or any(line in body for line in self.needed):
                keep.append(int(number))
        text = '{"keep": [' + ", ".join(map(str, keep)) + "]}"
        return CreateMessageResult(role="assistant", content=TextContent(type="text", text=text),
                                   model="oracle", stop_reason="endTurn")


def needed_lines(entries: Sequence[Entry]) -> set[str]:
    labels = label_session(entries)
    texts = {str(m.get("toolCallId")): text_of(m) for _, m in entries
             if m.get("role") == "toolResult"}
    out = set()
    for call_id, lines in labels.items():
        text_lines = texts.get(call_id, "").split("\n")
        out |= {text_lines[k] for k in lines
                if k < len(text_lines) and len(text_lines[k].strip()) >= MIN_LINE}
    return out


def _config(home: Path, judge: str, concurrency: int) -> None:
    empty = home.parent / "none"
    (home / "config.toml").write_text(
        f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
        '[paging]\ntoken_budget = 10000000\n'
        f'[distill]\njudge = "{judge}"\nconcurrency = {concurrency}\ntimeout_ms = 600000\n')


async def drive(entries: Sequence[Entry], name: str, judge: str, concurrency: int,
                oracle: Oracle | None) -> tuple[list[dict[str, Decision]], list[float]]:
    """Each run end's new decisions, and each select_context call's wall time."""
    with tempfile.TemporaryDirectory(prefix="sampling-eval-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        _config(home, judge, concurrency)
        server = create_server(load_settings(home=home))
        ledger = server.history.ledger
        per_run: list[dict[str, Decision]] = []
        times: list[float] = []
        kwargs = {"sampling_callback": oracle} if oracle else {}
        async with Client(server, **kwargs) as client:
            for _, _, prefix in run_end_prefixes(entries):
                before = len(ledger.session(name).decisions)
                started = time.perf_counter()
                result = await client.call_tool("select_context", {
                    "session": name, "messages": [m for _, m in prefix], "format": "pi"})
                times.append(time.perf_counter() - started)
                if result.is_error:  # a fixture run the selector refuses as a request
                    REFUSED.append(f"{name}: {result.content[0].text[:100]}")
                new = ledger.session(name).decisions[before:]
                per_run.append({d.target: d for d in new})
        server.history.close()
    return per_run, times


async def main_async(args: argparse.Namespace) -> None:
    count = text_counter()
    rows: list[Scored] = []
    prompts: list[str] = []
    sampling_times: list[float] = []
    local_times: list[float] = []
    runs = 0
    paths = sorted(
        require(args.fixtures, hint=f"pass --fixtures DIR or set {ENV}").rglob("*.jsonl"))
    for path in paths:
        entries = session_entries(path)
        name = re.sub(r"[^A-Za-z0-9._-]", "-", path.stem)[:100]
        oracle = Oracle(needed_lines(entries))
        decided, times = await drive(entries, name, "sampling", args.concurrency, oracle)
        _, local = await drive(entries, name + "-local", "local", args.concurrency, None)
        sampling_times += times
        local_times += local
        prompts += oracle.prompts
        runs += len(decided)
        made = iter(decided)
        rows += evaluate(entries, path.name,
                         decide=lambda prefix, plan, made=made: next(made))
    print(report(rows, len(paths), runs, judge="SAMPLING (scripted oracle client)"))
    sizes = [len(p) for p in prompts]
    tokens = [count(p) for p in prompts] if count else []
    if REFUSED:
        refused = [r for r in REFUSED if "-local:" not in r]
        print(f"\n  {len(refused)} run ends refused by select_context as requests (a tool call "
              "without its result); distillation ran before the refusal and its decisions count:")
        for line in sorted(set(refused)):
            print(f"    {line}")
    print(f"\n  prompts sent: {len(prompts)} over {runs} run ends "
          f"(concurrency {args.concurrency}; segments beyond it are judged locally)")
    if prompts:
        print(f"  prompt size: median {statistics.median(sizes):,.0f} chars, "
              f"max {max(sizes):,} chars" + (
                  f"; median {statistics.median(tokens):,.0f} tokens, max {max(tokens):,}, "
                  f"total {sum(tokens):,} cl100k tokens" if tokens else ""))
    sampled, local = statistics.median(sampling_times), statistics.median(local_times)
    print(f"  select_context per run end, median: sampling {1000 * sampled:.1f} ms, "
          f"local {1000 * local:.1f} ms (x{sampled / local:.2f}); "
          f"total {sum(sampling_times):.1f} s vs {sum(local_times):.1f} s")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--concurrency", type=int, default=6)
    anyio.run(main_async, parser.parse_args(argv))


if __name__ == "__main__":
    main()
