"""Generate a corpus of Pi, Claude Code and Codex session files for benchmarks (deterministic).

Each session is a run of turns: a user request, an assistant message with one tool call, the
tool's output (code-like lines with paths, identifiers and the occasional error), and a short
answer. Files are laid out under ``<root>/pi``, ``<root>/claude`` and ``<root>/codex`` the way
the agents lay them out, so the server's discovery finds them.

    python bench/corpus.py OUT_DIR --mb 500
"""

from __future__ import annotations

import argparse
import json
import random
import uuid
from pathlib import Path

WORDS = ("cache parser history navigator paging needle request handler retry timeout "
         "session index window budget token commit writer reader segment merge").split()


def output_text(rng: random.Random, turn: int, lines: int) -> str:
    out = []
    for i in range(lines):
        word = rng.choice(WORDS)
        path = f"src/{rng.choice(WORDS)}/{word}_{rng.randrange(400)}.py"
        if rng.random() < 0.01:
            out.append(f"{path}:{i}: ERROR {word}Error: code E{rng.randrange(10**6):06d} "
                       f"in turn {turn}")
        else:
            out.append(f"{path}:{i}: def {word}_{i}(value): return {rng.choice(WORDS)}(value, "
                       f"{rng.randrange(100)})")
    return "\n".join(out)


def pi_session(path: Path, rng: random.Random, turns: int, lines: int) -> None:
    parent = None
    n = 0
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps({"type": "session", "version": 3, "id": path.stem.split("_")[-1],
                              "timestamp": "2026-11-01T00:00:00.000Z", "cwd": "/bench/pi"}) + "\n")
        for turn in range(turns):
            for message in (
                {"role": "user", "content": f"Task {turn}: look at {rng.choice(WORDS)}"},
                {"role": "assistant", "stopReason": "toolUse", "content": [
                    {"type": "toolCall", "id": f"call-{turn}", "name": "bash",
                     "arguments": {"command": f"grep -rn {rng.choice(WORDS)} src"}}]},
                {"role": "toolResult", "toolCallId": f"call-{turn}", "toolName": "bash",
                 "isError": False, "content": [{"type": "text",
                                                "text": output_text(rng, turn, lines)}]},
                {"role": "assistant", "stopReason": "stop",
                 "content": [{"type": "text", "text": f"Turn {turn} done."}]},
            ):
                n += 1
                entry = f"{n:08x}"
                out.write(json.dumps({"type": "message", "id": entry, "parentId": parent,
                                      "timestamp": "2026-11-01T00:00:00.000Z",
                                      "message": message}) + "\n")
                parent = entry


def claude_session(path: Path, rng: random.Random, turns: int, lines: int) -> None:
    session = path.stem
    parent = None
    with open(path, "w", encoding="utf-8") as out:
        def line(kind: str, message: dict, **extra) -> None:
            nonlocal parent
            node = str(uuid.UUID(int=rng.getrandbits(128)))
            out.write(json.dumps({"type": kind, "uuid": node, "parentUuid": parent,
                                  "sessionId": session, "cwd": "/bench/claude",
                                  "version": "2.1.40", "timestamp": "2026-11-01T00:00:00.000Z",
                                  "message": message, **extra}) + "\n")
            parent = node

        for turn in range(turns):
            call = f"toolu_{turn:06d}{rng.randrange(10**6):06d}"
            line("user", {"role": "user", "content": f"Task {turn}: check {rng.choice(WORDS)}"})
            line("assistant", {"id": f"msg_{turn}a", "role": "assistant", "content": [
                {"type": "tool_use", "id": call, "name": "Bash",
                 "input": {"command": f"grep -rn {rng.choice(WORDS)} src"}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}})
            line("user", {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": call,
                 "content": output_text(rng, turn, lines)}]})
            line("assistant", {"id": f"msg_{turn}b", "role": "assistant", "content": [
                {"type": "text", "text": f"Turn {turn} done."}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 10, "output_tokens": 5}})


def codex_session(path: Path, rng: random.Random, turns: int, lines: int) -> None:
    thread = path.stem[-36:]
    with open(path, "w", encoding="utf-8") as out:
        def item(kind: str, payload: dict) -> None:
            out.write(json.dumps({"timestamp": "2026-11-01T00:00:00.000Z", "type": kind,
                                  "payload": payload}) + "\n")

        item("session_meta", {"id": thread, "timestamp": "2026-11-01T00:00:00.000Z",
                              "cwd": "/bench/codex", "cli_version": "0.150.0", "source": "cli"})
        for turn in range(turns):
            prompt = f"Task {turn}: inspect {rng.choice(WORDS)}"
            item("event_msg", {"type": "user_message", "message": prompt})
            item("response_item", {"type": "message", "role": "user",
                                   "content": [{"type": "input_text", "text": prompt}]})
            call = f"call_{turn}_{rng.randrange(10**6)}"
            item("response_item", {"type": "function_call", "name": "exec_command",
                                   "call_id": call, "arguments": json.dumps(
                                       {"cmd": f"grep -rn {rng.choice(WORDS)} src"})})
            item("response_item", {"type": "function_call_output", "call_id": call,
                                   "output": output_text(rng, turn, lines)})
            item("response_item", {"type": "message", "role": "assistant",
                                   "content": [{"type": "output_text",
                                                "text": f"Turn {turn} done."}]})


def generate(root: Path, megabytes: int, file_mb: int = 5, seed: int = 7) -> list[Path]:
    """About ``megabytes`` of sessions, a third per format, ``file_mb`` per file."""
    rng = random.Random(seed)
    files: list[Path] = []
    lines, turns = 40, max(1, file_mb * (1 << 20) // (40 * 75))
    count = max(3, megabytes // file_mb)
    for index in range(count):
        fmt = ("pi", "claude", "codex")[index % 3]
        ident = str(uuid.UUID(int=rng.getrandbits(128)))
        if fmt == "pi":
            path = root / "pi" / "--bench-pi--" / f"2026-11-01T00-00-00-000Z_{ident}.jsonl"
            writer = pi_session
        elif fmt == "claude":
            path = root / "claude" / "-bench-claude" / f"{ident}.jsonl"
            writer = claude_session
        else:
            day = root / "codex" / "2026" / "11" / "01"
            path = day / f"rollout-2026-11-01T00-00-00-{ident}.jsonl"
            writer = codex_session
        path.parent.mkdir(parents=True, exist_ok=True)
        writer(path, rng, turns, lines)
        files.append(path)
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--mb", type=int, default=500)
    args = parser.parse_args()
    files = generate(args.out, args.mb)
    total = sum(f.stat().st_size for f in files)
    print(f"wrote {len(files)} files, {total / (1 << 20):.0f} MB under {args.out}")


if __name__ == "__main__":
    main()
