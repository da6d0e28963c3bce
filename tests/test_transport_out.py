"""``serve``'s stdout (server/mcp/transport.py): replies go out on a private duplicate of fd 1, one
worker-thread hop each, through a pipe widened to 1 MiB; anything else printed to fd 1 while
serving lands on stderr, never in the JSON-RPC stream."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CHILD = r"""
import fcntl, os, sys
import anyio
from context_paging.server.mcp.transport import PIPE_BYTES, _wire_stdout

async def main():
    with _wire_stdout() as out:
        print("stray print", flush=True)
        os.write(1, b"stray write\n")
        await out.write('{"jsonrpc":"2.0","id":1,"result":{}}\n')
        size = fcntl.fcntl(out._file.fileno(), 1032)  # F_GETPIPE_SZ
        sys.stderr.write(f"pipe {size} {PIPE_BYTES}\n")
    print("after serving", flush=True)

anyio.run(main)
"""


def test_only_replies_reach_the_wire_and_fd_1_comes_back():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout == '{"jsonrpc":"2.0","id":1,"result":{}}\nafter serving\n'
    assert "stray print\n" in done.stderr and "stray write\n" in done.stderr


def test_the_reply_pipe_is_widened_where_the_system_allows():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=60, check=True)
    size, wanted = (int(x) for x in done.stderr.split("pipe ", 1)[1].split()[:2])
    limit = Path("/proc/sys/fs/pipe-max-size")
    if limit.exists() and int(limit.read_text()) >= wanted:
        assert size == wanted
    else:  # a tighter system limit: the pipe keeps a size of its own, and serving goes on
        assert size > 0
