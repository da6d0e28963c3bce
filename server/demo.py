"""``context-paging demo``: the main job on the bundled sample session, in a throwaway home.

It places the sample Pi session under a temporary session root, indexes it, searches for an
error string buried in a 900-line CI log, loads the turn that found it, and reads the exact
output back page by page — what a model does after older context has left its window.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import textwrap
from importlib import resources
from pathlib import Path

from index.service import History

SAMPLE = "demo-session.jsonl"
QUERY = "ECONNREFUSED 6379"


def sample_path() -> Path:
    return Path(str(resources.files("server") / "data" / SAMPLE))


def run_demo(args: argparse.Namespace | None = None) -> int:
    with tempfile.TemporaryDirectory(prefix="context-paging-demo-") as tmp:
        root = Path(tmp) / "pi-sessions" / "--home-dev-shop--"
        root.mkdir(parents=True)
        session_file = root / f"2026-11-20T09-00-00-000Z_{'demo-0f3c9a2e'}.jsonl"
        shutil.copyfile(sample_path(), session_file)
        history = History({"pi": root.parent, "claude": None, "codex": None}, Path(tmp) / "home")
        try:
            return _tour(history, "pi:demo-0f3c9a2e")
        finally:
            history.close()


def _tour(history: History, ref: str) -> int:
    summary = history.list_sessions()[0]
    navigator = history.navigator(ref)
    print(f"Session {summary.ref}: {summary.title!r}, {summary.size:,} bytes, "
          f"{len(navigator.visible)} history items.")
    result = history.ensure_indexed(ref)
    if result is not None:
        print(f"Indexed {result.added} items.")
    print(f"\n$ search_history query={QUERY!r}")
    reply = history.search(QUERY, session=ref, limit=3)
    for hit in reply.references:
        print(f"  {hit['history_id']}  #{hit['sequence']} {hit['kind']}  tools={hit['tools']}")
        print(textwrap.indent(textwrap.fill(hit["preview"], 96), "      "))
    if not reply.references:
        print("  no match — the demo data is damaged")
        return 1
    best = reply.references[0]
    item = history.load(ref, [best["history_id"]])[0]
    print(f"\n$ load_history history_ids=[{best['history_id']!r}]")
    for result in item.get("tool_results", []):
        text = " ".join(b["text"] for b in result["content"] if b and b.get("type") == "text")
        line = next((ln for ln in text.splitlines() if "ECONNREFUSED" in ln), None)
        print(f"  {result['tool_name']} output: {len(text):,} characters; the line that matters:")
        if line:
            print(f"    {line}")
        page = history.read_output(ref, history_id=best["history_id"], source="tool_result",
                                   tool_call_id=result["tool_call_id"], offset=0, limit=2000)
        print(f"\n$ read_context_output offset=0 → {len(page['text'])} of "
              f"{page['total_characters']:,} characters, next_offset={page['next_offset']}")
        recalled = history.recall(ref, tool_call_id=result["tool_call_id"],
                                  pattern="ERROR|ECONNREFUSED")
        print(f"\n$ recall tool_call_id={result['tool_call_id']!r} pattern='ERROR|ECONNREFUSED'")
        print(textwrap.indent(recalled.text, "  "))
    return 0
