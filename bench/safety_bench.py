"""What the proxy's safety measures cost, and what they hold, measured side by side in one run.

* **half-open connections**: 300 connections that each send half a request line to the proxy
  (the real server settings, the header deadline shortened to ``--deadline`` seconds), next to
  uvicorn's stock settings (what the proxy had before); the server's open file descriptors
  while they wait and once the deadline has passed;
* **start-up**: ``context-paging proxy`` started as a subprocess; when a connection is first
  accepted and when the first health request is answered (equal: it listens only once ready);
* **guard**: the per-request check of ``Host``/``Origin``/``Sec-Fetch-*`` against the 200-odd
  bytes of a header list, next to a dict built from the same headers;
* **strict JSON**: a changed 100 KB message written as strict JSON with numbers as spelled,
  next to ``json.dumps`` of the same value;
* **private home**: tightening an old home of ``--files`` files (once), and the check on every
  later start.

    python bench/safety_bench.py [--deadline 1.0] [--files 10000] [--against <checkout>]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from context_paging.index.home.private import secure_home
from context_paging.server.proxy import commands as proxy_cli
from context_paging.server.proxy import wire
from context_paging.server.proxy.guard import refusal


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def half_open(deadline: float, guarded: bool) -> None:
    """300 half-sent request lines against the server with the deadline, or (``guarded``
    False) with uvicorn's stock protocol, the settings before it."""
    import uvicorn

    async def app(scope, receive, send):  # never reached: no request head completes
        return None

    sock = proxy_cli.listen("127.0.0.1", 0)
    server = proxy_cli._server(app, sock, header_timeout=deadline)
    if not guarded:
        server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_config=None,
                                               log_level="warning", http="h11"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    base = _fds()
    conns = [socket.create_connection(sock.getsockname()) for _ in range(300)]
    for conn in conns:
        conn.sendall(b"POST /v1/mess")
    waiting, started = 0, time.monotonic()
    while time.monotonic() - started < deadline * 0.8:  # the most accepted at once
        waiting = max(waiting, _fds() - base - 300)
        time.sleep(0.01)
    time.sleep(deadline)
    after = _fds() - base - 300  # the proxy's side of them (our own 300 left out)
    for conn in conns:
        conn.close()
    server.should_exit = True
    thread.join()
    print(f"half-open connections, {'header deadline' if guarded else 'stock uvicorn h11'}: "
          f"proxy-side fds {waiting} at most while waiting, {after} open {deadline * 1.8:.1f}s "
          "after they were sent")


def start_up(against: str | None = None) -> None:
    """``against``: another checkout's source tree, started instead (through PYTHONPATH)."""
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    home = tempfile.mkdtemp()
    started = time.monotonic()
    env = {**os.environ, "PYTHONPATH": against} if against else None
    child = subprocess.Popen([sys.executable, "-m", "context_paging", "--home", home, "proxy",
                              "--port", str(port)], stderr=subprocess.DEVNULL, env=env)
    accepted = answered = None
    try:
        while answered is None and time.monotonic() - started < 60:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
                    accepted = accepted or time.monotonic() - started
                    conn.sendall(b"GET /_context-paging/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                 b"Connection: close\r\n\r\n")
                    if conn.recv(12).startswith(b"HTTP/1.1 200"):
                        answered = time.monotonic() - started
            except ConnectionRefusedError:
                time.sleep(0.01)
    finally:
        child.terminate()
        child.wait()
    print(f"start-up{' of ' + against if against else ''}: first connection accepted at "
          f"{accepted:.2f}s, first answer at {answered:.2f}s")


def _per_call(fn, rounds: int) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - started) / rounds


def guard_cost() -> None:
    headers = [(b"host", b"127.0.0.1:8787"), (b"user-agent", b"claude-cli/2.1.197"),
               (b"x-api-key", b"sk-ant-" + b"x" * 90), (b"anthropic-version", b"2023-06-01"),
               (b"content-type", b"application/json"), (b"content-length", b"123456")]
    check = _per_call(lambda: refusal(headers, frozenset()), 100_000)
    floor = _per_call(lambda: {k: v for k, v in headers}, 100_000)
    print(f"guard: {check * 1e6:.2f} µs a request, {check / floor:.1f}x a dict of the headers")


def strict_cost() -> None:
    message = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": f"t{i}", "content": "line of output é " * 12,
         "meta": {"n": i, "score": i / 7}} for i in range(400)]}
    raw = json.dumps({"messages": [message]}).encode()
    body = wire.read_body(raw, "messages")
    value = body.value["messages"][0]
    strict = _per_call(lambda: wire.strict(value, body.numbers), 200)
    plain = _per_call(lambda: json.dumps(value, ensure_ascii=False, separators=(",", ":")), 200)
    print(f"strict JSON: {len(raw) / 1024:.0f} KB message {strict * 1e3:.2f} ms, "
          f"{strict / plain:.1f}x json.dumps ({plain * 1e3:.2f} ms)")


def private_home(files: int) -> None:
    home = Path(tempfile.mkdtemp())
    for folder in range(files // 100):
        (home / "ledger" / str(folder)).mkdir(parents=True)
        for n in range(100):
            (home / "ledger" / str(folder) / f"{n}.jsonl").write_text("{}\n")
    for path in [home, *home.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    first = _per_call(lambda: secure_home(home), 1)
    later = _per_call(lambda: secure_home(home), 1000)
    print(f"private home: {files:,} files tightened in {first * 1e3:.0f} ms once; "
          f"{later * 1e6:.1f} µs a start after that")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--deadline", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--against", metavar="CHECKOUT",
                        help="also time another checkout's start-up (e.g. git archive <commit>)")
    args = parser.parse_args()
    half_open(args.deadline, guarded=False)
    half_open(args.deadline, guarded=True)
    if args.against:
        start_up(args.against)
    start_up()
    guard_cost()
    strict_cost()
    private_home(args.files)


if __name__ == "__main__":
    main()
