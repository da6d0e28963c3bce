"""The scripted task the fake model drives: 18 shell steps, each printing a file of ~8.5 KB
full of unique markers, then a final answer.

The model's next move is read from the request itself, never from a counter: the newest step
header among the tool outputs says which step is done, so a paged window (the old outputs gone)
still leads to the right next call. Markers are single words (letters and digits) so the search
index keeps each one whole.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

STEPS = 18
LINES = 61  # lines per step file, ~140 bytes each: ~8.5 KB a step
WORDS = 6  # markers per line
HEADER = re.compile(r"E2E STEP (\d+) OF 18\b")
DONE = "E2E-TASK-COMPLETE"
PROMPT = ("This is a scripted end-to-end task. Run each command the assistant asks for "
          "and report its output; task token e2etaskprompt7q.")
PROMPT_TOKEN = "e2etaskprompt7q"


def marker(step: int, line: int, word: int) -> str:
    digest = hashlib.sha1(f"{step}:{line}:{word}".encode()).hexdigest()[:8]
    return f"mk{step:02d}l{line:02d}w{word}{digest}"


def step_file(step: int) -> str:
    lines = [f"E2E STEP {step:02d} OF {STEPS}"]
    for line in range(LINES):
        words = " ".join(marker(step, line, word) for word in range(WORDS))
        lines.append(f"line {line:02d} of step {step:02d}: {words} end of line")
    return "\n".join(lines) + "\n"


def write_files(folder: Path) -> None:
    for step in range(1, STEPS + 1):
        (folder / f"step-{step:02d}.txt").write_text(step_file(step))


def command(step: int) -> str:
    return f"cat step-{step:02d}.txt"


def done_steps(body: dict[str, Any]) -> int:
    """The newest step whose output the request holds (0 before the first)."""
    outputs = _outputs_text(body)
    return max((int(m) for text in outputs for m in HEADER.findall(text)), default=0)


def _outputs_text(body: dict[str, Any]) -> list[str]:
    texts = []
    for message in body.get("messages") or ():
        for block in message.get("content") if isinstance(message.get("content"), list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result":
                texts.append(json.dumps(block.get("content")))
    for item in body.get("input") if isinstance(body.get("input"), list) else ():
        if isinstance(item, dict) and str(item.get("type", "")).endswith("_output"):
            texts.append(json.dumps(item.get("output")))
    for content in body.get("contents") if isinstance(body.get("contents"), list) else ():
        for part in content.get("parts") or () if isinstance(content, dict) else ():
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                texts.append(json.dumps(part["functionResponse"].get("response")))
    return texts


def final_answer() -> str:
    return f"All {STEPS} steps ran. {DONE}"


def evicted_markers(step: int = 1) -> list[str]:
    """Markers of ``step`` to look for once it has left the window."""
    return [marker(step, 3, 1), marker(step, 40, 4)]


def in_conversation(raw: bytes) -> bool:
    """Whether a request belongs to the task (its prompt or any step output is in it)."""
    return PROMPT_TOKEN.encode() in raw or b"E2E STEP " in raw


# --- the call in each agent's tool shape ----------------------------------------------------


def anthropic_call(tool_names: set[str], cmd: str) -> tuple[str, dict[str, Any]] | None:
    if "Bash" in tool_names:  # Claude Code
        return "Bash", {"command": cmd, "description": "Print the next step file"}
    if "bash" in tool_names:  # Pi, OpenCode
        return "bash", {"command": cmd}
    return None


def gemini_call(tool_names: set[str], cmd: str) -> dict[str, Any] | None:
    """A ``functionCall`` for Gemini CLI's shell tool (the CLI gives it its id)."""
    if "run_shell_command" in tool_names:
        return {"name": "run_shell_command", "args": {"command": cmd}}
    return None


def responses_call(tool_names: set[str], cmd: str) -> dict[str, Any] | None:
    """A function or custom tool call item for the request's shell tool."""
    if "exec_command" in tool_names:  # Codex with its function tools
        return {"type": "function_call", "name": "exec_command",
                "arguments": json.dumps({"cmd": cmd})}
    if "shell" in tool_names:
        return {"type": "function_call", "name": "shell",
                "arguments": json.dumps({"command": ["bash", "-lc", cmd]})}
    if "bash" in tool_names:  # Pi on the Responses API
        return {"type": "function_call", "name": "bash", "arguments": json.dumps({"command": cmd})}
    if "exec" in tool_names:  # Codex's default model: JavaScript that calls its tools
        source = f"const r = await tools.exec_command({{cmd: {json.dumps(cmd)}}});\ntext(r);"
        return {"type": "custom_tool_call", "name": "exec", "input": source}
    return None
