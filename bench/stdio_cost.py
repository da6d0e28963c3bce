"""Where the time of one select_context call over stdio goes, step by step, in one process.

The workload is select_bench's (300 turns, 15 MiB of tool output, budget 128,000): after a cold
call, each measured call sends one new turn after the previous reply's ``last_message_id``, as
``select_bench``'s "stdio, one more turn, after_id" line does. Every step a request and its reply
pass through on the server side of ``context-paging serve`` is timed on the same bytes, plus what
the Python client does with the reply, so the sum can be compared with the end-to-end figure:

* client dump: the Python client serializing the request;
* read: our transport's check of the line's size;
* parse: serve's parse of the line's bytes (orjson, then the SDK's message model from the
  value: server/mcp/transport.py), then the tools/call params; beside it, not in the sum, what it
  replaced on the same bytes: decoding the line, the lone-surrogate scan and the SDK's own
  ``validate_json``;
* arguments: the tool's argument validation against its signature (``messages`` is a large
  nested list);
* library: ``History.select_context`` itself (the other engineers' part);
* reply: our result model, its dump and the text copy;
* output check: the SDK's validation of the structured content against the output model;
* dump: the SDK turning the result into the JSON-RPC line it writes;
* client: the Python client parsing that line into a CallToolResult.

    python bench/stdio_cost.py [--turns 9]

The cold call (the whole 15 MiB conversation, first call on a fresh home) is one sample; the
``after_id`` column is the median over ``--turns`` calls, in milliseconds. Pipes, thread hops and
the client's reading are not here: ``bench/stdio_trace.py`` traces those across the processes.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from select_bench import arguments, turn, workload  # noqa: E402

# What serve's parse replaced, timed beside it on the same bytes (not in the sum).
SDK_PARSE = "(not summed) SDK: decode, scan, validate"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=9)
    args = parser.parse_args()

    import mcp_types as types
    from context_paging.server.config import load_settings
    from context_paging.server.mcp import tools as mcp_server
    from context_paging.server.mcp import transport

    with tempfile.TemporaryDirectory() as home:
        settings = load_settings(home=Path(home), overrides={})
        limit = settings.get("paging", "max_request_bytes")
        server = mcp_server.create_server(settings)
        history = server.history  # type: ignore[attr-defined]
        tool = server._tool_manager.get_tool("select_context")
        cold: dict[str, list[float]] = {}
        warm: dict[str, list[float]] = {}
        sizes: dict[str, list[tuple[int, int]]] = {"cold": [], "after_id": []}

        def one(n: int, call: dict, steps: dict[str, list[float]]) -> dict:
            """Every step of one call, on the bytes a Python client sends."""
            def timed(name: str, fn):
                start = time.perf_counter()
                value = fn()
                steps.setdefault(name, []).append(time.perf_counter() - start)
                return value

            request = types.JSONRPCRequest(jsonrpc="2.0", id=n, method="tools/call",
                                           params={"name": "select_context", "arguments": call})
            line = timed("client: dump the request", lambda: request.model_dump_json(
                by_alias=True, exclude_unset=True) + "\n")
            data = line.encode()
            timed("read: size limit", lambda: transport.oversize(data, limit))
            message = timed("parse: JSON-RPC line (transport.parse_message)",
                            lambda: transport.parse_message(data))
            params = timed("parse: tools/call params", lambda: types.CallToolRequestParams
                           .model_validate(message.params, by_name=False))
            timed("arguments: tool signature",
                  lambda: tool.fn_metadata.validate_arguments(params.arguments))
            reply = timed("library: History.select_context", lambda: history.select_context(
                "bench", call["messages"], **_kwargs(call)))
            result = timed("reply: result model + text copy", lambda: mcp_server._reply(
                mcp_server.SelectContextResult(**reply)))
            timed("output check: structured content", lambda: tool.fn_metadata.convert_result(
                result))
            response = timed("dump: the SDK's result dict", lambda: types.JSONRPCResponse(
                jsonrpc="2.0", id=n, result=result.model_dump(
                    by_alias=True, mode="json", exclude_none=True)))
            out = timed("dump: the SDK's JSON-RPC line", lambda: response.model_dump_json(
                by_alias=True, exclude_unset=True))
            ours = timed("dump: serve's line (transport.dump_response)",
                         lambda: transport.dump_response(response))
            assert ours == out, "the serve dump must give the SDK's bytes (and apply here)"
            timed("client: parse the reply", lambda: types.CallToolResult.model_validate(
                types.jsonrpc_message_adapter.validate_json(out, by_name=False).result))
            # Last, so the garbage its second copy of the request makes lands on no other step.
            sdk = timed(SDK_PARSE, lambda: types.jsonrpc_message_adapter.validate_json(
                transport.repair_line(data.decode("utf-8", "replace"))[0], by_name=False))
            assert message == sdk, "serve's parse must give the SDK's message (and apply here)"
            sizes["cold" if steps is cold else "after_id"].append((len(line), len(out)))
            return reply

        messages = workload()
        last = one(1, arguments(messages), cold)
        for n in range(2, args.turns + 2):
            new = turn(300 + n - 1, 52_428) + [messages[-1]]
            last = one(n, arguments(new) | {"after_id": last["last_message_id"]}, warm)
        history.close()

    print(f"{'step':<40} {'cold':>10} {'after_id p50':>14}")
    for label, key in (("request line", 0), ("reply line", 1)):
        print(f"{label:<40} {sizes['cold'][0][key] / 1024:7,.0f} KiB "
              f"{statistics.median(s[key] for s in sizes['after_id']) / 1024:10,.0f} KiB")
    totals = [0.0, 0.0]
    for name in warm:
        figures = [cold[name][0] * 1000, statistics.median(warm[name]) * 1000]
        if name != SDK_PARSE:
            totals = [t + f for t, f in zip(totals, figures, strict=True)]
        print(f"{name:<40} {figures[0]:7.2f} ms {figures[1]:10.2f} ms")
    print(f"{'sum of the steps':<40} {totals[0]:7.2f} ms {totals[1]:10.2f} ms")


def _kwargs(call: dict) -> dict:
    return {"fmt": call.get("format", "auto"), "system": call.get("system"),
            "tools": call.get("tools"), "model_window": call.get("model_window"),
            "token_budget": call.get("token_budget"), "after_id": call.get("after_id")}


if __name__ == "__main__":
    main()
