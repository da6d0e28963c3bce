"""Reader throughput next to plain ``json.loads`` on the same lines, measured in one run.

For the largest fixture and a generated Pi session (200 MB by default) it times:

* ``json.loads`` of every line (the reference the ratios are to), and ``orjson.loads`` of every
  line (the parser ``read_jsonl`` uses where it reads alike: index/jsonl.py),
* ``read_jsonl`` (splitting, tolerant parsing, records),
* the whole load (read, build the conversation, project history items),
* an incremental refresh after appending one turn,

and prints MB/s with the ratio to ``json.loads``. Each figure is the best of ``--repeat`` runs.

    python bench/reader_bench.py [--mb 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import orjson
from context_paging.index.jsonl import read_jsonl
from context_paging.index.sessions import SessionFile, load

try:
    from bench.recorded import require, sessions_folder
except ModuleNotFoundError:  # run as a file (python bench/x.py): bench/ itself is on the path
    from recorded import require, sessions_folder

FIXTURES = sessions_folder()


def generate_pi_session(path: Path, megabytes: int) -> int:
    """A Pi v3 session of user / assistant+call / result turns with ~20 KB outputs."""
    target = megabytes << 20
    line = 0
    parent = None
    with open(path, "w", encoding="utf-8") as out:
        out.write(json.dumps({"type": "session", "version": 3, "id": "bench",
                              "timestamp": "2026-11-01T00:00:00.000Z", "cwd": "/bench"}) + "\n")
        turn = 0
        while out.tell() < target:
            turn += 1
            body = "\n".join(
                f"src/module_{turn % 97}/file_{i}.py:{i * 7}: def handler_{i}(request): "
                f"return process(request, retries={i % 5})  # turn {turn}"
                for i in range(200)
            )
            for entry in (
                {"role": "user", "content": f"Request {turn}: check module {turn % 97}"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "private " * 20, "thinkingSignature": "s"},
                    {"type": "text", "text": f"Looking at module {turn % 97}."},
                    {"type": "toolCall", "id": f"call-{turn}", "name": "grep",
                     "arguments": {"pattern": "def handler", "path": f"src/module_{turn % 97}"}}],
                 "stopReason": "toolUse", "model": "bench",
                 "usage": {"input": 10, "output": 5, "cacheRead": 0, "cacheWrite": 0}},
                {"role": "toolResult", "toolCallId": f"call-{turn}", "toolName": "grep",
                 "content": [{"type": "text", "text": body}], "isError": False},
            ):
                line += 1
                entry_id = f"{line:08x}"
                out.write(json.dumps({"type": "message", "id": entry_id, "parentId": parent,
                                      "timestamp": "2026-11-01T00:00:00.000Z",
                                      "message": entry}) + "\n")
                parent = entry_id
    return path.stat().st_size


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def measure(path: Path, repeat: int) -> None:
    size = path.stat().st_size
    mb = size / (1 << 20)
    raw_lines = path.read_bytes().split(b"\n")

    def loads_only() -> None:
        for raw in raw_lines:
            if raw:
                json.loads(raw)

    def orjson_only() -> None:
        for raw in raw_lines:
            if raw:
                orjson.loads(raw)

    baseline = best_of(repeat, loads_only)
    fast = best_of(repeat, orjson_only)
    reader = best_of(repeat, lambda: read_jsonl(str(path)))
    whole = best_of(repeat, lambda: load(str(path)).projection)
    session = load(str(path))
    items = len(session.projection.items)
    print(f"{path.name}: {mb:.1f} MB, {len(raw_lines):,} lines, {items:,} history items")
    for label, seconds in (("json.loads only", baseline), ("orjson.loads only", fast),
                           ("read_jsonl", reader),
                           ("load + build + project", whole)):
        print(f"  {label:<24} {seconds:8.3f} s  {mb / seconds:8.1f} MB/s  "
              f"x{seconds / baseline:.2f} of json.loads")
    incremental(path, repeat)


def incremental(path: Path, repeat: int) -> None:
    """Append one small turn to a copy and refresh: only the new bytes are parsed."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / path.name
        copy.write_bytes(path.read_bytes())
        session = SessionFile(str(copy))
        session.refresh()
        _ = session.projection
        before = session.cursor.bytes_parsed_total
        times = []
        for i in range(repeat):
            with open(copy, "a", encoding="utf-8") as out:
                out.write(json.dumps({"type": "message", "id": f"zz{i:06d}", "parentId": None,
                                      "timestamp": "2026-11-01T00:00:00.000Z",
                                      "message": {"role": "user", "content": "one more"}}) + "\n")
            start = time.perf_counter()
            session.refresh()
            _ = session.projection
            times.append(time.perf_counter() - start)
        parsed = session.cursor.bytes_parsed_total - before
        print(f"  incremental refresh after one appended line: {min(times) * 1000:.1f} ms "
              f"(parsed {parsed // repeat} bytes per refresh; rebuild of the conversation is "
              "the rest)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    largest = max(require(FIXTURES).rglob("*.jsonl"), key=os.path.getsize)
    measure(largest, args.repeat)
    with tempfile.TemporaryDirectory() as tmp:
        generated = Path(tmp) / "generated-pi.jsonl"
        generate_pi_session(generated, args.mb)
        measure(generated, args.repeat)


if __name__ == "__main__":
    main()
