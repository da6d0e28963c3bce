"""Where the wall time of a select_context call over stdio goes, traced across both processes.

Runs ``context-paging serve`` (this checkout) in a child process whose transport and History are
wrapped to stamp ``time.monotonic()`` (one clock for both processes on Linux) at each hand-over,
drives it with the SDK's real stdio client on select_bench's workload (a cold call, then one new
turn at a time after ``last_message_id``), and prints the median of each span:

* request in: client serializes and writes the line, the server's transport reads it;
* to the library: JSON-RPC validation, argument validation, the worker-thread hop;
* library: ``History.select_context``;
* reply out: result model and text copy, output validation, the response's JSON dump;
* write: the reply line through the pipe (the client reads as it goes);
* client: from the last byte written to ``call_tool`` returning (the client's line splitting,
  parsing, result model and output-schema check).

    python bench/stdio_trace.py [--turns 9] [--forms messages,positions]

With both reply forms (the default), the turns alternate between them on the same session (the
form changes only the reply, not the state), so each form's spans are measured side by side
under the same load: ``messages`` echoes the whole window, ``positions`` sends only the
messages the server made or changed and ranges of the host's own (paging/window_form.py).

``STDIO_TRACE_NO_TEXT_COPY=1`` replaces the reply's text copy with ``{}`` (an experiment: the
MCP spec asks for the copy, and the server sends it) to show what the copy costs end to end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from select_bench import arguments, turn, workload  # noqa: E402

# The child: `serve` with stamps. Stamps go to stderr as one JSON line at exit.
CHILD = r"""
import json, os, sys, time
from context_paging.server.mcp import transport
from context_paging.index import service
trace = open(os.environ["STDIO_TRACE_FILE"], "a", buffering=1)
if os.environ.get("PIPE_SZ"):
    import fcntl; print(fcntl.fcntl(1, 1031, int(os.environ["PIPE_SZ"])), file=sys.stderr)
def stamp(name): trace.write(json.dumps([name, time.monotonic()]) + "\n")

import gc, threading
gc_time = [0.0, 0, 0.0]  # seconds spent in the cyclic GC, collections, start of the current one
def on_gc(phase, info):
    if phase == "start":
        gc_time[2] = time.perf_counter()
    else:
        gc_time[0] += time.perf_counter() - gc_time[2]
        gc_time[1] += 1
gc.callbacks.append(on_gc)
GC_MODE = os.environ.get("STDIO_TRACE_GC", "")  # experiments: "off" (no cyclic GC), "freeze"
if GC_MODE == "off":
    gc.disable()

read = transport._Stdin.__anext__
async def traced_read(self):
    line = await read(self)
    parsed = getattr(self, "parsed", None)  # a line this checkout's transport parsed itself
    if parsed is not None:
        if getattr(parsed.message, "method", None) == "tools/call":
            stamp("read")
    elif '"tools/call"' in line[:200] or '"tools/call"' in line[-400:]:
        stamp("read")
    return line
transport._Stdin.__anext__ = traced_read

select = service.History.select_context
def traced_select(self, *args, **kwargs):
    stamp("library_start")
    before = gc_time[0]
    try:
        return select(self, *args, **kwargs)
    finally:
        stamp("library_end")
        if GC_MODE == "freeze":
            gc.freeze()  # what the calls so far allocated is never walked again
        trace.write(json.dumps(["gc_in_library", gc_time[0] - before]) + "\n")
service.History.select_context = traced_select

from context_paging.server.mcp import tools as mcp_server
judge_for = mcp_server.judge_for
async def traced_judge_for(*args, **kwargs):
    stamp("tool_start")  # the SDK is done: JSON-RPC, then the arguments validated
    try:
        return await judge_for(*args, **kwargs)
    finally:
        stamp("judge_end")
mcp_server.judge_for = traced_judge_for
if os.environ.get("STDIO_TRACE_NO_TEXT_COPY"):  # an experiment only: what the copy costs
    mcp_server.compact_json = lambda value: "{}"
if hasattr(mcp_server, "_reply"):
    reply = mcp_server._reply
    def traced_reply(model, *args, **kwargs):
        stamp("reply_start")
        try:
            return reply(model, *args, **kwargs)
        finally:
            stamp("reply_end")
    mcp_server._reply = traced_reply
from mcp.shared import jsonrpc_dispatcher
write_result = jsonrpc_dispatcher.JSONRPCDispatcher._write_result
async def traced_write_result(self, request_id, result):
    trace.write(json.dumps(["gc_total", gc_time[0]]) + "\n")
    if "structuredContent" in result and "last_message_id" in result["structuredContent"]:
        stamp("response")
    return await write_result(self, request_id, result)
jsonrpc_dispatcher.JSONRPCDispatcher._write_result = traced_write_result

class Out:
    def __init__(self, inner): self.inner = inner
    async def write(self, text):
        if not hasattr(self, "sized"):
            import fcntl
            wire = getattr(self.inner, "_file", None) or self.inner.wrapped  # ours, or anyio's
            self.sized = fcntl.fcntl(wire.fileno(), 1032)  # F_GETPIPE_SZ
            trace.write(json.dumps(["pipe_bytes", self.sized]) + "\n")
        # select_context's reply (its size depends on the reply form): the only one with this
        big = '"last_message_id"' in text
        if big: stamp("write_start")
        await self.inner.write(text)
        if big: self.big = True
    async def flush(self):
        await self.inner.flush()
        if getattr(self, "big", False):
            stamp("write_end"); self.big = False

import anyio, functools
from io import TextIOWrapper
from mcp.server import stdio as sdk_stdio
real = sdk_stdio.stdio_server
def patched(stdin=None, stdout=None):
    # This checkout's transport brings its own stdout; an older one lets the SDK open it.
    inner = stdout or anyio.wrap_file(TextIOWrapper(sys.stdout.buffer, encoding="utf-8"))
    return real(stdin=stdin, stdout=Out(inner))
transport.stdio_server = patched
from context_paging.server.cli import main
if os.environ.get("STDIO_PROFILE"):  # the event loop's thread only (the library runs in a worker)
    import cProfile
    profile = cProfile.Profile()
    profile.enable()
    try:
        main(sys.argv[1:])
    finally:
        profile.disable()
        profile.dump_stats(os.environ["STDIO_PROFILE"])
    sys.exit(0)
sys.exit(main(sys.argv[1:]))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=9, help="turns per reply form")
    parser.add_argument("--forms", default="messages,positions",
                        help="reply forms, alternating turn by turn")
    args = parser.parse_args()
    forms = args.forms.split(",")

    import anyio
    from mcp import Client, StdioServerParameters

    messages = workload()
    client_stamps: list[tuple[float, float]] = []

    async def run() -> list:
        with tempfile.TemporaryDirectory() as home:
            trace = Path(home) / "trace.jsonl"
            params = StdioServerParameters(command=sys.executable,
                                           args=["-c", CHILD, "--home", home, "serve"],
                                           env=dict(os.environ, STDIO_TRACE_FILE=str(trace)),
                                           cwd=home)  # so `-c` imports PYTHONPATH's checkout
            async with Client(params) as client:
                result = await client.call_tool("select_context", arguments(messages))
                last = result.structured_content
                for n in range(2, args.turns * len(forms) + 2):
                    new = turn(300 + n - 1, 52_428) + [messages[-1]]
                    form = forms[n % len(forms)]
                    call = arguments(new) | {"after_id": last["last_message_id"]}
                    if form != "messages":  # an older server need not know the argument
                        call["reply_form"] = form
                    start = time.monotonic()
                    result = await client.call_tool("select_context", call)
                    client_stamps.append((start, time.monotonic(), form,
                                          len(result.content[0].text)))
                    assert not result.is_error, result.content[0].text
                    last = result.structured_content
            return [json.loads(x) for x in trace.read_text().splitlines()]

    stamps = anyio.run(run)
    calls = _per_call(stamps)[1:]  # the first is the cold call
    spans: dict[str, dict[str, list[float]]] = {}
    sizes: dict[str, list[int]] = {}
    for (start, end, form, size), c in zip(client_stamps, calls, strict=True):
        sizes.setdefault(form, []).append(size)
        for name, a, b in (("request in", start, c["read"]),
                           ("to the library", c["read"], c["library_start"]),
                           ("  SDK to our tool", c["read"], c.get("tool_start", 0)),
                           ("  sampling judge", c.get("tool_start", 0), c.get("judge_end", 0)),
                           ("  worker hop", c.get("judge_end", 0), c["library_start"]),
                           ("library", c["library_start"], c["library_end"]),
                           ("reply out", c["library_end"], c["write_start"]),
                           ("  back on the loop", c["library_end"], c.get("reply_start", 0)),
                           ("  our reply", c.get("reply_start", 0), c.get("reply_end", 0)),
                           ("  SDK result", c.get("reply_end", 0), c.get("response", 0)),
                           ("  SDK dump", c.get("response", 0), c["write_start"]),
                           ("write", c["write_start"], c["write_end"]),
                           ("client", c["write_end"], end),
                           ("total", start, end),
                           ("GC in library", 0, c.get("gc_in_library", 0)),
                           ("GC server-side", c.get("gc_prev", 0), c.get("gc_total", 0))):
            spans.setdefault(name, {}).setdefault(form, []).append(b - a)
    print(f"{'':<18}" + "".join(f"{form:>30}" for form in forms))
    print(f"{'text copy bytes':<18}" + "".join(
        f"{statistics.median(sizes[form]):>30,.0f}" for form in forms))
    for name, by_form in spans.items():
        print(f"{name:<18}" + "".join(
            f"{statistics.median(v) * 1000:8.2f} ms (p50 of {len(v)}; max {max(v) * 1000:6.2f})"
            for v in (by_form[form] for form in forms)))


def _per_call(stamps: list) -> list[dict[str, float]]:
    calls: list[dict[str, float]] = []
    for name, t in stamps:
        if name == "pipe_bytes":
            print(f"reply pipe: {t:,} bytes")
            continue
        if name == "read":
            calls.append({})
            if len(calls) > 1:  # the GC time from one reply's dump to the next one's
                calls[-1]["gc_prev"] = calls[-2].get("gc_total", 0)
        if calls:
            calls[-1].setdefault(name, t)
    return calls


if __name__ == "__main__":
    main()
