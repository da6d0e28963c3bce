"""``context-paging serve`` over stdio, call by call, in wall time and in the server's CPU time;
optionally two versions of the code side by side, their calls interleaved.

A raw JSON-RPC client (each request line written once, in advance, the same bytes for every
server; each reply read as a line and parsed with orjson) drives ``serve`` on select_bench's
workload (300 turns, 15 MiB of tool output, budget 128,000): launch to the ``initialize``
reply ("connect"), the first select_context of the whole 16 MB conversation ("first call"),
the same request again (``--repeat`` times), and one new turn at a time after the previous
reply's ``last_message_id`` (``--turns`` times). The client does next to nothing, so what is
timed is the server's: reading, parsing, the library, the reply.

The server's CPU time is its user and system time from ``/proc/<pid>/stat`` (every thread,
finished ones included), in clock ticks of 10 ms: the repeated and after_id figures divide a
total over their calls, so the tick hardly shows. On a machine that other work loads, CPU time
moves far less than the wall clock.

    python bench/stdio_calls.py [--against <checkout>] [--rounds 3] [--repeat 5] [--turns 5]

``--against`` runs a second server with ``PYTHONPATH=<checkout>`` (an older version of the
code) beside this one: each round launches both, and every call goes to one, then the other.
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

sys.path.insert(0, str(Path(__file__).resolve().parent))

from select_bench import arguments, turn, workload  # noqa: E402

try:
    import orjson

    loads = orjson.loads
except ImportError:  # the bench's own parse only; any JSON parser reads the replies
    loads = json.loads

TICK = os.sysconf("SC_CLK_TCK")
INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"}}}) + "\n"
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n"


def params(call: dict) -> bytes:
    return json.dumps({"name": "select_context", "arguments": call}).encode()


def request(ident: int, dumped: bytes) -> bytes:
    """A tools/call line: the params dumped once, each request with its own id."""
    return b'{"jsonrpc": "2.0", "id": %d, "method": "tools/call", "params": %s}\n' % (ident,
                                                                                       dumped)


class Server:
    """One ``serve`` process, and the CPU time it has used."""

    def __init__(self, label: str, pythonpath: str | None, options: tuple[str, ...] = ()
                 ) -> None:
        self.label = label
        self.home = tempfile.mkdtemp()
        env = dict(os.environ)
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        script = (shutil.which("context-paging")
                  or str(Path(sys.executable).parent / "context-paging"))
        start = time.perf_counter()
        self.process = subprocess.Popen([script, "--home", self.home, *options, "serve"],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, env=env)
        self.process.stdin.write(INITIALIZE.encode())
        self.process.stdin.flush()
        self.answer(0)
        self.connect = time.perf_counter() - start
        self.process.stdin.write(INITIALIZED.encode())
        self.process.stdin.flush()

    def cpu(self) -> float:
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime

    def answer(self, ident: int) -> dict:
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.label}: serve exited before answering")
            message = loads(line)
            if message.get("id") == ident:
                return message

    def call(self, ident: int, line: bytes) -> tuple[float, dict]:
        start = time.perf_counter()
        self.process.stdin.write(line)
        self.process.stdin.flush()
        result = self.answer(ident)["result"]
        elapsed = time.perf_counter() - start
        assert not result.get("isError"), result["content"][0]["text"]
        return elapsed, result["structuredContent"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)
        self.process.stdout.close()
        shutil.rmtree(self.home, ignore_errors=True)


def one_round(servers: list[Server], first: bytes, repeat: int, turns: int,
              figures: dict[str, dict[str, list[float]]]) -> None:
    def note(server: Server, name: str, value: float) -> None:
        figures.setdefault(server.label, {}).setdefault(name, []).append(value)

    messages = workload()
    last: dict[str, dict] = {}
    cpu_before = {s.label: s.cpu() for s in servers}
    for server in servers:
        note(server, "connect (wall)", server.connect)
        elapsed, last[server.label] = server.call(1, request(1, first))
        note(server, "first call (wall)", elapsed)
    for server in servers:
        note(server, "first call (CPU)", server.cpu() - cpu_before[server.label])
    marks = {s.label: s.cpu() for s in servers}
    for n in range(repeat):
        for server in servers:
            note(server, "repeated (wall)", server.call(2 + n, request(2 + n, first))[0])
    for server in servers:
        note(server, "repeated (CPU per call)", (server.cpu() - marks[server.label]) / repeat)
    marks = {s.label: s.cpu() for s in servers}
    for n in range(turns):
        new = turn(300 + n, 52_428) + [messages[-1]]
        for server in servers:
            call = arguments(new) | {"after_id": last[server.label]["last_message_id"]}
            elapsed, last[server.label] = server.call(100 + n, request(100 + n, params(call)))
            note(server, "after_id (wall)", elapsed)
    for server in servers:
        note(server, "after_id (CPU per call)", (server.cpu() - marks[server.label]) / turns)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="a checkout to run beside this one (PYTHONPATH)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--turns", type=int, default=5)
    args = parser.parse_args()

    first = params(arguments(workload()))
    figures: dict[str, dict[str, list[float]]] = {}
    for n in range(args.rounds):
        launch = [("this", None)] + ([("against", args.against)] if args.against else [])
        if n % 2:
            launch.reverse()  # neither is always launched, or called, first
        servers = [Server(label, path) for label, path in launch]
        try:
            one_round(servers, first, args.repeat, args.turns, figures)
        finally:
            for server in servers:
                server.close()
    labels = [label for label in ("against", "this") if label in figures]
    print(f"{'median over ' + str(args.rounds) + ' rounds, ms':<28}"
          + "".join(f"{label:>12}" for label in labels)
          + ("       ratio" if len(labels) == 2 else ""))
    for name in figures["this"]:
        values = [statistics.median(figures[label][name]) * 1000 for label in labels]
        ratio = f"{values[1] / values[0]:12.2f}" if len(values) == 2 and values[0] else ""
        print(f"{name:<28}" + "".join(f"{v:12.1f}" for v in values) + ratio)


if __name__ == "__main__":
    main()
