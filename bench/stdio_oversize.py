"""``context-paging serve``'s memory for a request line over ``paging.max_request_bytes``:
peak and current RSS of the server after a ``tools/call`` line of ``--mb`` megabytes (written
in 8 MiB pieces by a raw client) and a ``tools/list`` after it, both answered; optionally
beside another checkout, the two run in turn each round.

    python bench/stdio_oversize.py [--against <checkout>] [--mb 64 336] [--rounds 2]

``--against`` runs the second server with ``PYTHONPATH=<checkout>``. Memory figures are the
kernel's (``VmHWM``, ``VmRSS`` of ``/proc/<pid>/status``), not timings: the machine's load does
not move them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

INITIALIZE = json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "bench", "version": "1"}}}).encode() + b"\n"
INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
PIECE = b"y" * (8 << 20)


def run(pythonpath: str | None, megabytes: int) -> tuple[int, int]:
    """(peak RSS, RSS) in kB of a server that answered the line and the call after it."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    script = shutil.which("context-paging") or str(Path(sys.executable).parent / "context-paging")
    home = tempfile.mkdtemp()
    server = subprocess.Popen([script, "--home", home, "serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
    try:
        server.stdin.write(INITIALIZE)
        server.stdin.flush()
        server.stdout.readline()
        server.stdin.write(INITIALIZED + b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
                           b'"params":{"name":"select_context","arguments":{"x":"')
        for _ in range(max(1, megabytes // 8)):
            server.stdin.write(PIECE)
        server.stdin.write(b'"}}}\n{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n')
        server.stdin.flush()
        ids = {json.loads(server.stdout.readline())["id"] for _ in range(2)}
        assert ids == {1, 2}, ids
        status = dict(line.split(":", 1) for line in
                      Path(f"/proc/{server.pid}/status").read_text().splitlines())
        return int(status["VmHWM"].split()[0]), int(status["VmRSS"].split()[0])
    finally:
        server.stdin.close()
        server.wait(60)
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", help="another checkout, run beside this one")
    parser.add_argument("--mb", type=int, nargs="+", default=[64, 336])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    versions = [("this", None)] + ([("against", args.against)] if args.against else [])
    for megabytes in args.mb:
        best: dict[str, tuple[int, int]] = {}
        for _ in range(args.rounds):
            for label, path in versions:
                peak, rss = run(path, megabytes)
                old = best.get(label)
                best[label] = (peak, rss) if old is None else (min(old[0], peak), min(old[1], rss))
        for label, (peak, rss) in best.items():
            print(f"{megabytes:>5} MB line  {label:>8}: peak {peak / 1024:7.0f} MB  "
                  f"after {rss / 1024:7.0f} MB")
        if "against" in best:
            print(f"{'':>14}peak ratio this/against {best['this'][0] / best['against'][0]:.2f}")


if __name__ == "__main__":
    main()
