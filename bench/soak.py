"""Soak: thousands of tool calls over stdio against the installed ``context-paging serve``.

One client drives one server process through a mixed workload: select_context on a growing
conversation (a new turn every few calls), search_history, browse_history, load_history and
recall on that conversation's ledger session. Reported: calls per second, errors, and the server
process's resident memory (VmRSS from /proc) after warm-up and at the end, so a leak shows as
memory that keeps growing instead of staying flat.

    python bench/soak.py [--calls 3000] [--flat-ratio 1.5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

SESSION = "soak"


def console_script() -> str:
    found = shutil.which("context-paging") or str(Path(sys.executable).parent / "context-paging")
    if not Path(found).exists():
        raise SystemExit("context-paging is not installed (pip install -e .)")
    return found


def server_pid(home: Path) -> int:
    """The serve process whose environment names our private home (psutil is not required)."""
    wanted = f"CONTEXT_PAGING_HOME={home}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"serve" in cmdline and wanted in environ.split(b"\0"):
            return int(entry.name)
    raise SystemExit("could not find the server process in /proc")


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def turn(n: int) -> list[dict]:
    call_id = f"toolu_{n:05d}"
    output = "\n".join(f"src/soak/file-{n}-{i}.py:{i}: needle{n % 50} value={i * n}"
                       for i in range(40))
    return [
        {"role": "user", "content": f"step {n}: look for needle{n % 50} in the soak tree"},
        {"role": "assistant", "content": [
            {"type": "text", "text": f"Searching step {n}."},
            {"type": "tool_use", "id": call_id, "name": "Bash",
             "input": {"command": f"grep -rn needle{n % 50} src/soak"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": output}]},
    ]


async def soak(calls: int, home: Path) -> dict:
    env = {**os.environ, "CONTEXT_PAGING_HOME": str(home)}
    params = StdioServerParameters(command=console_script(), args=["serve"], env=env)
    messages: list[dict] = []
    counts: Counter[str] = Counter()
    errors: list[str] = []
    with open(home / "stderr.txt", "w") as errlog:
        async with Client(stdio_client(params, errlog=errlog)) as client:
            pid = server_pid(home)
            rss = {"start": rss_kib(pid)}
            started = time.perf_counter()
            n = 0
            for i in range(calls):
                if i == min(200, calls // 10):
                    rss["warm"] = rss_kib(pid)
                kind = i % 6
                ref = f"ledger:{SESSION}"
                if kind == 0 or not messages:
                    messages += turn(n)
                    n += 1
                    tool, arguments = "select_context", {
                        "session": SESSION, "messages": messages, "format": "anthropic",
                        "token_budget": 20_000}
                elif kind == 1:
                    tool, arguments = "search_history", {
                        "query": f"needle{i % 50}", "session": ref, "load": i % 12 == 1}
                elif kind == 2:
                    tool, arguments = "browse_history", {
                        "direction": ("backward", "forward", "around")[i % 3],
                        "sequence": i % max(1, n), "count": 5, "session": ref}
                elif kind == 3:
                    tool, arguments = "search_history", {"query": "", "session": ref,
                                                         "limit": 3}
                elif kind == 4:
                    tool, arguments = "recall", {"tool_call_id": f"toolu_{i % n:05d}",
                                                 "pattern": "needle", "limit": 20,
                                                 "session": ref}
                else:
                    tool, arguments = "browse_history", {"direction": "backward", "count": 3,
                                                         "session": ref}
                if tool == "browse_history" and i % 5 == 0:
                    found = await client.call_tool(tool, arguments)
                    ids = [r["history_id"] for r in
                           (found.structured_content or {}).get("references", [])][:3]
                    counts[tool] += 1
                    if not ids:
                        continue
                    tool, arguments = "load_history", {"history_ids": ids, "session": ref}
                result = await client.call_tool(tool, arguments)
                counts[tool] += 1
                if result.is_error:
                    errors.append(f"{tool}: {result.content[0].text[:200]}")
            elapsed = time.perf_counter() - started
            rss["end"] = rss_kib(pid)
    stderr = (home / "stderr.txt").read_text()
    total = sum(counts.values())
    return {"calls": total, "seconds": elapsed, "calls_per_second": total / elapsed,
            "by_tool": dict(counts), "errors": errors, "rss_kib": rss,
            "messages": len(messages), "traceback_in_stderr": "Traceback" in stderr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--flat-ratio", type=float, default=1.5,
                        help="memory counts as flat when end RSS <= warm RSS x this")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="context-paging-soak-") as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        none = Path(tmp) / "none"
        (home / "config.toml").write_text(
            f'[sources]\npi = "{none}"\nclaude_code = "{none}"\ncodex = "{none}"\n')
        report = anyio.run(soak, args.calls, home)
    rss = report["rss_kib"]
    warm = rss.get("warm", rss["start"])
    flat = rss["end"] <= warm * args.flat_ratio
    print(f"calls: {report['calls']} in {report['seconds']:.1f} s = "
          f"{report['calls_per_second']:.0f} calls/s ({report['messages']} messages stored)")
    print(f"by tool: {report['by_tool']}")
    print(f"server RSS: start {rss['start'] / 1024:.1f} MiB, after warm-up {warm / 1024:.1f} MiB, "
          f"end {rss['end'] / 1024:.1f} MiB -> {'flat' if flat else 'GROWING'}")
    print(f"errors: {len(report['errors'])}; traceback on stderr: "
          f"{report['traceback_in_stderr']}")
    for line in report["errors"][:5]:
        print(f"  {line}")
    failed = report["errors"] or report["traceback_in_stderr"] or not flat
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
