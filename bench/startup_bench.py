"""How fast each command starts, as ratios to a bare ``python -c pass`` timed in the same run.

Each round runs every command once, in turn (interleaved, so a burst of load on the shared
machine falls on all of them alike); the figures are medians over ``--rounds``:

* ``python -c pass``: the interpreter alone (the floor every ratio divides by);
* ``--version``, ``config``, ``install-config --client claude-code``, ``install-proxy --client
  claude-code`` (both print what they would write), ``doctor`` (no proxy listening: it checks
  and reports), each against a fresh home and ``HOME``;
* ``serve``: from launch until the reply to ``tools/list`` is read (``initialize``, the
  ``initialized`` notification, then ``tools/list``, as MCP clients start), the MCP SDK's
  import included; and, in the same process, until a first ``select_context`` of one small
  turn is answered (that call may wait for the index and tokenizer to finish loading).

The commands are the installed ``context-paging`` script's; ``PYTHONPATH=<checkout>`` measures
another version of the code with the same script.

    python bench/startup_bench.py [--rounds 7]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "--version": ["--version"],
    "config": ["config"],
    "install-config": ["install-config", "--client", "claude-code"],
    "install-proxy": ["install-proxy", "--client", "claude-code"],
    "doctor": ["doctor", "--port", "9"],
}
SMALL_TURN = [{"role": "user", "content": "Where is the parser defined?"}]


def script() -> str:
    return shutil.which("context-paging") or str(Path(sys.executable).parent / "context-paging")


def environment(home: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["HOME"] = str(home)  # no real agent configuration is read or written
    env["CONTEXT_PAGING_HOME"] = str(home / "data")
    return env


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def _send(process: subprocess.Popen, message: dict) -> None:
    process.stdin.write((json.dumps(message) + "\n").encode())
    process.stdin.flush()


def _answer(process: subprocess.Popen, ident: int) -> dict:
    while True:
        line = process.stdout.readline()
        if not line:
            raise RuntimeError("serve exited before answering")
        message = json.loads(line)
        if message.get("id") == ident:
            return message


def serve(env: dict[str, str]) -> tuple[float, float]:
    """(seconds to the tools/list reply, seconds to the first select_context reply)."""
    start = time.perf_counter()
    process = subprocess.Popen([script(), "serve"], env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        _send(process, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "startup-bench", "version": "1"}}})
        _answer(process, 1)
        _send(process, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        _send(process, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        tools = _answer(process, 2)
        listed = time.perf_counter() - start
        assert tools["result"]["tools"], tools
        _send(process, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "select_context",
            "arguments": {"session": "startup", "messages": SMALL_TURN, "format": "anthropic"}}})
        reply = _answer(process, 3)
        assert not reply["result"].get("isError"), reply
        return listed, time.perf_counter() - start
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"python -c pass": [], **{k: [] for k in COMMANDS},
                                     "serve: tools/list answered": [],
                                     "serve: first select_context answered": []}
    command = script()
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as tmp:
            env = environment(Path(tmp))
            times["python -c pass"].append(timed([sys.executable, "-c", "pass"], env))
            for name, argv in COMMANDS.items():
                times[name].append(timed([command, *argv], env))
            listed, selected = serve(env)
            times["serve: tools/list answered"].append(listed)
            times["serve: first select_context answered"].append(selected)
    floor = statistics.median(times["python -c pass"])
    print(f"{args.rounds} interleaved rounds, medians; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:<40} {median * 1000:8.1f} ms   x{median / floor:6.2f} python -c pass")


if __name__ == "__main__":
    main()
