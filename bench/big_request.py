"""Big select_context requests over stdio: time and the server's peak memory per request size.

For each size, a fresh ``context-paging serve`` (the installed console script) gets one
``select_context`` request whose conversation carries that many megabytes of text (one long tool
output among a few ordinary turns), sent as one raw JSON-RPC line. Reported, side by side in one
run: the seconds from sending the line to reading the reply, the server's peak resident memory
(VmHWM from /proc) and its baseline after start-up, and peak over request size. The last row is
a request over the configured limit (``paging.max_request_bytes``), which is refused unread.

    python bench/big_request.py [--sizes 1 5 20] [--limit-mb 64]
"""

from __future__ import annotations

import argparse
import json
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MB = 1 << 20


def console_script() -> str:
    found = shutil.which("context-paging", path=str(Path(sys.executable).parent))
    if not found:
        raise SystemExit("context-paging is not installed next to this python (pip install -e .)")
    return found


def memory(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for {pid}")


def request_line(size: int) -> str:
    output = ("x" * 99 + "\n") * (size // 100)
    messages = [
        {"role": "user", "content": "run the build"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "t1", "name": "bash", "input": {"command": "make"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                      "content": output}]},
        {"role": "assistant", "content": "The build printed a lot."},
        {"role": "user", "content": "summarize it"},
    ]
    return json.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "select_context", "arguments": {
            "session": "big", "messages": messages, "format": "anthropic"}}})


def read_reply(process: subprocess.Popen, timeout: float) -> dict:
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    if not ready:
        raise SystemExit("no reply in time")
    return json.loads(process.stdout.readline())


def run_one(size: int, limit_mb: int) -> dict:
    home = Path(tempfile.mkdtemp(prefix="big-request-"))
    (home / "config.toml").write_text(
        f'[sources]\npi = "{home}/none"\nclaude_code = "{home}/none"\ncodex = "{home}/none"\n'
        f'[paging]\nmax_request_bytes = {limit_mb * MB}\n')
    process = subprocess.Popen([console_script(), "--home", str(home), "serve"],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL)
    try:
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"}}}
        process.stdin.write((json.dumps(hello) + "\n").encode())
        process.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        process.stdin.flush()
        read_reply(process, 60)
        # warm the tokenizer and the index code with a small request first
        process.stdin.write((request_line(1000) + "\n").encode())
        process.stdin.flush()
        read_reply(process, 60)
        baseline = memory(process.pid, "VmHWM")
        line = (request_line(size) + "\n").encode()
        start = time.perf_counter()
        process.stdin.write(line)
        process.stdin.flush()
        reply = read_reply(process, 600)
        seconds = time.perf_counter() - start
        peak = memory(process.pid, "VmHWM")
    finally:
        process.kill()
        process.wait()
        shutil.rmtree(home, ignore_errors=True)
    result = reply.get("result") or {}
    text = (result.get("content") or [{}])[0].get("text", "") if result else str(reply)
    return {"bytes": len(line), "seconds": seconds, "baseline": baseline, "peak": peak,
            "error": text[:60] if result.get("isError") or "error" in reply else ""}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 5, 20])
    parser.add_argument("--limit-mb", type=int, default=64,
                        help="paging.max_request_bytes for the run, in MiB")
    args = parser.parse_args()
    rows = [run_one(int(mb * MB), args.limit_mb) for mb in args.sizes]
    rows.append(run_one(int((args.limit_mb + 1) * MB), args.limit_mb))
    print(f"{'request':>10} {'seconds':>8} {'baseline':>9} {'peak':>8} {'peak-base':>9} "
          f"{'(peak-base)/request':>19}  outcome")
    for row in rows:
        grown = row["peak"] - row["baseline"]
        print(f"{row['bytes'] / MB:8.1f}MB {row['seconds']:8.2f} {row['baseline'] / MB:7.0f}MB "
              f"{row['peak'] / MB:6.0f}MB {grown / MB:7.0f}MB {grown / row['bytes']:19.1f}  "
              f"{row['error'] or 'ok'}")


if __name__ == "__main__":
    main()
