"""What the tool definitions cost the model, in tokens, per tool and in total.

A client sends each tool's name, description and input schema to the model with every request
(the output schema stays with the client), so that is what is counted: the compact JSON of
``{"name", "description", "input_schema"}`` per tool, with the project's own tokenizer
(tiktoken cl100k_base from server/data; other providers' tokenizers differ by some percent, the
ratios hold). ``all`` is what ``serve`` lists by default, ``recovery`` what ``serve --tools
recovery`` lists (what install-config writes for chat clients).

    python bench/tool_cost.py                                   # the current server
    python bench/tool_cost.py --before OLD_tools.json           # and a committed snapshot beside it
    python bench/tool_cost.py --before <(git show 09a4128:tests/snapshots/tools.json)
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
from context_paging.server.config import load_settings
from context_paging.server.mcp.tools import RECOVERY_TOOLS, create_server
from context_paging.server.tokens import text_counter
from mcp import Client


def model_facing(tool: dict[str, Any]) -> str:
    """The part of a tools/list entry a client passes on to the model, as compact JSON."""
    return json.dumps({"name": tool["name"], "description": tool.get("description", ""),
                       "input_schema": tool["inputSchema"]},
                      ensure_ascii=False, separators=(",", ":"))


async def listed(tools: str) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as home:
        server = create_server(load_settings(home=home, environ={}), tools=tools)
        try:
            async with Client(server) as client:
                result = await client.list_tools()
        finally:
            server.history.close()
    return [t.model_dump(by_alias=True, exclude_none=True) for t in result.tools]


def costs(tools: list[dict[str, Any]]) -> dict[str, int]:
    count = text_counter()
    assert count is not None, "the shipped cl100k_base encoding is missing"
    return {t["name"]: count(model_facing(t)) for t in tools}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="a tools/list snapshot (JSON) to compare")
    args = parser.parse_args()
    after_all = costs(anyio.run(listed, "all"))
    after_recovery = costs(anyio.run(listed, "recovery"))
    before = costs(json.loads(args.before.read_text())) if args.before else None
    names = list(after_all)
    head = ["tool"] + (["before"] if before else []) + ["all", "recovery"]
    rows = []
    for name in names:
        row = [f"`{name}`"]
        if before is not None:
            row.append(f"{before.get(name, 0):,}")
        row += [f"{after_all[name]:,}",
                f"{after_recovery[name]:,}" if name in after_recovery else "—"]
        rows.append(row)
    total = ["**total**"] + ([f"**{sum(before.values()):,}**"] if before else [])
    total += [f"**{sum(after_all.values()):,}**", f"**{sum(after_recovery.values()):,}**"]
    rows.append(total)
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")
    if before:
        old = sum(before.values())
        print(f"\nrecovery-only / before-all: {sum(after_recovery.values()) / old:.2f}"
              f"; all / before-all: {sum(after_all.values()) / old:.2f}"
              f"; recovery tools set {sorted(RECOVERY_TOOLS)}")


if __name__ == "__main__":
    main()
