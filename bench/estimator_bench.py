"""How far upstream's characters/4 estimate is from tiktoken (cl100k_base) on the real fixtures.

Every message of every fixture's active path is estimated both ways (thinking is not kept by the
reader, so it is not counted by either). Printed per fixture: total tokens each way, the ratio
chars4 / tiktoken, and the median per-message ratio. A ratio below 1 means characters/4
undercounts — the risk upstream's W10 names for code, JSON and non-Latin text.

    python bench/estimator_bench.py
"""

from __future__ import annotations

import statistics
from typing import Any

from context_paging.index.model import ImageBlock, Message, TextBlock, ToolCall
from context_paging.index.sessions import load
from context_paging.paging.estimate import chars4_tokens
from context_paging.paging.tokens import counted_tokens
from context_paging.server.tokens import text_counter

try:
    from bench.recorded import require, sessions_folder
except ModuleNotFoundError:  # run as a file (python bench/x.py): bench/ itself is on the path
    from recorded import require, sessions_folder

FIXTURES = sessions_folder()


def pi_shaped(message: Message) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            blocks.append({"type": "text", "text": block.text})
        elif isinstance(block, ToolCall):
            blocks.append({"type": "toolCall", "id": block.id, "name": block.name,
                           "arguments": block.arguments})
        elif isinstance(block, ImageBlock):
            blocks.append({"type": "image", "data": block.data, "mimeType": block.mime})
    role = {"tool_result": "toolResult"}.get(message.role, message.role)
    return {"role": role, "content": blocks}


def main() -> None:
    count = text_counter()
    if count is None:
        raise SystemExit("tiktoken's encoding is unavailable; nothing to compare")
    require(FIXTURES)
    print(f"{'fixture':<62} {'chars/4':>9} {'tiktoken':>9} {'ratio':>6} {'median':>7}")
    all_c4 = all_tk = 0
    for path in sorted(FIXTURES.rglob("*.jsonl")):
        messages = [pi_shaped(m) for m in load(str(path)).conversation.messages]
        c4 = [chars4_tokens(m) for m in messages]
        tk = [counted_tokens(m, count) for m in messages]
        ratios = [a / b for a, b in zip(c4, tk, strict=True) if b]
        all_c4 += sum(c4)
        all_tk += sum(tk)
        print(f"{path.name[:62]:<62} {sum(c4):>9,} {sum(tk):>9,} "
              f"{sum(c4) / max(1, sum(tk)):>6.2f} {statistics.median(ratios or [0]):>7.2f}")
    print(f"{'all fixtures':<62} {all_c4:>9,} {all_tk:>9,} {all_c4 / all_tk:>6.2f}")


if __name__ == "__main__":
    main()
