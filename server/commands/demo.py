"""``context-paging demo``: the main job on the bundled sample session, in a throwaway home.

1. The sample Pi session (a developer chasing a flaky test; 65 entries, ~290 KB of tool output)
   is replayed request by request through ``select_context`` at a 12,000-token budget, the way a
   host would call it before every model request. Each request prints one row: the window's
   size, how many messages left it, how many tool outputs it carries distilled, the mode and
   any fallback. Old test logs are distilled at mid-run checkpoints and at the run's end; the
   newest one is shown as the model sees it.
2. Then, as the model would, it searches the ledger for an error that left the window long ago
   (``ECONNREFUSED`` in line 612 of a 900-line CI log), loads that turn exactly, reads the raw
   output page by page, and recalls just the matching lines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import textwrap
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from context_paging.index.service import History
from context_paging.index.window.pipeline import ContextSettings
from context_paging.server.config import Settings
from context_paging.server.tokens import text_counter

Emit = Callable[[str], object]
Report = Callable[[float, "float | None", str], object]  # done, total (None: unknown), message


def _silent(done: float, total: float | None, message: str) -> None:
    pass

SAMPLE = "demo-session.jsonl"
BUDGET = 12_000
SESSION = "demo-flaky-checkout"
REF = f"ledger:{SESSION}"
SYSTEM = "You are a careful coding agent working in /home/dev/shop."


def sample_path() -> Path:
    return Path(str(resources.files("context_paging.server") / "data" / SAMPLE))


def sample_messages() -> list[dict[str, Any]]:
    """The Pi AgentMessages of the sample session, in order."""
    out = []
    for line in sample_path().read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry.get("type") == "message":
            out.append(entry["message"])
    return out


def run_demo(args: argparse.Namespace | None = None, emit: Emit = print,
             progress: Report = _silent, settings: Settings | None = None) -> int:
    """Run the tour; ``emit`` writes one block of output (the CLI passes ``print``) and
    ``progress`` hears which step is running (the CLI draws it on stderr).

    The tour runs in a throwaway home, so each run shows the same thing. With ``settings``
    (the CLI's), the ledger session it made is then kept in the user's data directory, in
    place of the one an earlier demo left, and the sample session file beside it: the
    commands docs/getting-started.md shows run on them."""
    with tempfile.TemporaryDirectory(prefix="context-paging-demo-") as tmp:
        history = History({"pi": None, "claude": None, "codex": None}, Path(tmp),
                          ContextSettings(token_budget=BUDGET), text_counter)
        try:
            replay(history, emit, progress)
            progress(0, None, "searching the ledger, as the model would")
            code = recover(history, REF, emit)
        finally:
            history.close()
        if code == 0 and settings is not None:
            try:
                emit(keep(Path(tmp), settings))
            except Exception as exc:  # the tour itself went well: say why nothing was kept
                print(f"context-paging: the demo's session was not kept in {settings.home}: "
                      f"{exc}", file=sys.stderr)
        return code


def keep(tmp: Path, settings: Settings) -> str:
    """Move the tour's ledger session into the user's home (replacing an earlier demo's, whose
    search-index items go with it) and copy the sample session file there; what to try next."""
    from context_paging.server.histories import forget_sessions

    home = settings.home
    forget_sessions(settings, [REF])
    for folder, name in (("ledger", f"{SESSION}.jsonl"), ("state", f"{SESSION}.json")):
        (home / folder).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp / folder / name, home / folder / f".{name}.part")
        os.replace(home / folder / f".{name}.part", home / folder / name)
    (home / "demo").mkdir(exist_ok=True)
    shutil.copyfile(sample_path(), home / "demo" / SAMPLE)
    sample = _tilde(home / "demo" / SAMPLE)
    return (f"\nThe demo's session stays in your data directory as {REF}, so you can\n"
            "page through it yourself (docs/getting-started.md has more):\n\n"
            f"  context-paging search ECONNREFUSED --session {REF}\n"
            f"  context-paging recall call_02 --pattern ERROR --session {REF}\n"
            f"  context-paging replay {sample}\n\n"
            f"`context-paging forget --session {REF}` deletes it\n"
            f"(and {_tilde(home / 'demo')} holds the sample file).")


def _tilde(path: Path) -> str:
    """A path with the user's home directory written ``~``, as one would type it."""
    home = os.path.expanduser("~")
    text = str(path)
    return "~" + text[len(home):] if text.startswith(home.rstrip("/") + "/") else text


# What each mode in the table means, said once below it for the modes the run showed.
MODE_MEANINGS = {
    "within_budget": "the whole conversation fits the budget and is sent unchanged.",
    "paged": "the oldest whole turns left the window; the notice below stands in their place.",
    "protected_overflow": (
        "the newest exchange alone is over the budget. That exchange (the latest request and "
        "the tool outputs the model has not answered yet) is never cut, so the window is sent "
        "above the budget, within the model's own window; once the model has answered, the "
        "exchange is older history and the next request pages it out."),
    "recovery": (
        "even the newest exchange does not fit the model's window, so its tool outputs are "
        "replaced by recall references the model can page back in."),
}


# Priced as a host without a prompt cache (paging/cache_cost.py): the short sample ends before
# its next cut, and under a cache the edits of already-sent outputs would wait for that cut.
MODEL = "none/sample"


def replay(history: History, emit: Emit, progress: Report = _silent) -> None:
    progress(0, None, "loading the tokenizer and preparing the first window")
    messages = sample_messages()
    emit(f"Replaying {len(messages)} messages of the sample session through select_context "
          f"(budget {BUDGET:,} tokens, cut target {BUDGET * 5 // 8:,}; a host without a "
          f"prompt cache, so distillation's edits land as soon as they are decided).\n")
    emit(f"{'request':>7}  {'sent/total msgs':>15}  {'window tokens':>13}  {'evicted':>7}  "
          f"{'shortened':>9}  mode           fallback")
    requests = [i for i, m in enumerate(messages) if m["role"] != "assistant"
                and (i + 1 == len(messages) or messages[i + 1]["role"] == "assistant")]
    previous_notice = None
    modes: list[str] = []
    for number, end in enumerate(requests, 1):
        if number > 1:
            progress(number - 1, len(requests), "replaying the sample session")
        outgoing = messages[: end + 1]
        reply = history.select_context(SESSION, outgoing, fmt="pi", system=SYSTEM,
                                       model=MODEL)
        marker = ""
        if reply["notice"] and reply["notice"] != previous_notice:
            marker = "  ← the cut moved"
        previous_notice = reply["notice"] or previous_notice
        emit(f"{number:>7}  {len(reply['messages']):>7}/{len(outgoing):<7}  "
              f"{reply['estimated_tokens']:>13,.0f}  {reply['evicted_messages']:>7}  "
              f"{len(reply['distilled']):>9}  "
              f"{reply['mode']:<14} {reply['fallback_reason'] or '-'}{marker}")
        modes.append(reply["mode"])
    emit(explain_modes(modes))
    emit("\nThe notice the model sees in place of the evicted turns:\n")
    emit(textwrap.indent(previous_notice or "(none)", "  "))
    stats = history.stats(f"ledger:{SESSION}")
    emit(f"\nDistillation (\"shortened\": outputs the window carries cut down or as a stub): "
         f"{stats.distilled_outputs} output(s) distilled, {stats.omitted_exchanges} exchange(s) "
         f"omitted, {stats.distilled_saved_tokens:,} tokens saved; each is one recall away.")
    shown = reply["distilled"][-1] if reply["distilled"] else None
    if shown is not None:
        message = next(m for m in reply["messages"] if m.get("toolCallId") == shown["tool_call_id"])
        text = message["content"][0]["text"]
        emit(f"The newest one, as the model now sees it ({len(text):,} characters):\n")
        lines = [line if len(line) <= 150 else line[:149] + "…" for line in text.splitlines()]
        more = [f"… {len(lines) - 8} more lines"] if len(lines) > 8 else []
        emit(textwrap.indent("\n".join(lines[:8] + more), "  "))


def recover(history: History, ref: str, emit: Emit) -> int:
    query = "ECONNREFUSED 6379"
    emit(f"\n$ search_history query={query!r}   (the ledger of every request above)")
    reply = history.search(query, session=ref, limit=3)
    for hit in reply.references:
        emit(f"  {hit['history_id']}  #{hit['sequence']} {hit['kind']:<10} tools={hit['tools']}")
        emit(textwrap.indent(textwrap.fill(hit["preview"], 92), "      "))
    turn = next((h for h in reply.references if "bash" in h["tools"]), None)
    if turn is None:
        emit("  the CI-log turn was not found — the demo data is damaged")
        return 1
    item = history.load(ref, [turn["history_id"]])[0]
    result = item["tool_results"][0]
    text = "".join(b["text"] for b in result["content"] if b and b.get("type") == "text")
    # read_context_output pages the result as exact JSON (its text plus quoting and fields), so
    # the size shown for the loaded output is that same count: one number for one output.
    page = history.read_output(ref, history_id=turn["history_id"], source="tool_result",
                               tool_call_id=result["tool_call_id"], offset=0, limit=2000)
    emit(f"\n$ load_history history_ids=[{turn['history_id']!r}]")
    emit(f"  {result['tool_name']} output, exact: {text.count(chr(10)) + 1} lines, "
         f"{page['total_characters']:,} characters as JSON")
    emit(f"\n$ read_context_output offset=0 limit=2000 → {len(page['text']):,} of "
         f"{page['total_characters']:,} characters, next_offset={page['next_offset']}")
    recalled = history.recall(ref, tool_call_id=result["tool_call_id"], pattern="ERROR")
    emit(f"\n$ recall tool_call_id={result['tool_call_id']!r} pattern='ERROR'")
    emit(textwrap.indent(recalled.text, "  "))
    return 0


def explain_modes(modes: list[str]) -> str:
    """One line per mode the table showed, in the order they first appeared."""
    lines = ["\nWhat the modes mean:"]
    for mode in dict.fromkeys(modes):
        meaning = MODE_MEANINGS.get(mode, "see docs/window.md.")
        lines.append(textwrap.fill(f"{mode}: {meaning}", 92, initial_indent="  ",
                                   subsequent_indent="    "))
    return "\n".join(lines)
