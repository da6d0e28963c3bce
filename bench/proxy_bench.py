"""The proxy's added latency, next to the plain HTTP hop measured in the same run.

Default: upstream's bench workload (bench/proxy_work.py) replayed as 300 growing requests
(53 KB to 15.9 MB), each sent in turn to the provider directly, through a plain pass-through on
the proxy's own HTTP stack (the hop), and through the proxy as ``context-paging proxy`` builds it,
with the default settings; the hop and the proxy are served as the command serves it (its guard,
connection deadlines and limits: ``bench.proxy_work.Command``). Printed: p50/p95 of the time
each adds to the direct request, its growth per MB of body (least squares), and the first
request.

To compare with another checkout, copy this file and bench/proxy_work.py into it (``git
archive <commit> | tar -x -C DIR``) and run it there with ``PYTHONPATH=DIR``.

``--phases``: no HTTP; the proxy's ``_page`` over the same growing requests in one process, each
step's CPU time (p50 and growth per MB): reading the body against the previous one, keying the
conversation, ``select_context``, the recovery-tools check, the splice, the stats note.

``--fixtures``: the older figure, every recorded Claude Code and Codex session turned back into
its requests, next to ``json.loads`` + ``json.dumps`` of each body.

    python bench/proxy_bench.py [--api anthropic|responses] [--turns 300] [--paging-off]
    python bench/proxy_bench.py --phases [--api responses] [--turns 300] [--idle 0.05]
    python bench/proxy_bench.py --fixtures [--budget 16000] [--estimator chars4|tiktoken]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2 as httpx  # noqa: E402
from context_paging.index.home.proxied import ProxyLog  # noqa: E402
from context_paging.server.config import load_settings  # noqa: E402
from context_paging.server.histories import make_history  # noqa: E402
from context_paging.server.proxy import wire  # noqa: E402
from context_paging.server.proxy.app import Proxy, Upstreams  # noqa: E402

from tests.fake_provider import FakeProvider, Served  # noqa: E402

FIXTURES = ROOT.parent / "shared" / "fixtures" / "sessions"
if not FIXTURES.is_dir():
    FIXTURES = Path("/work/shared/fixtures/sessions")
MODEL_ITEMS = {"reasoning", "function_call", "custom_tool_call", "local_shell_call",
               "web_search_call", "tool_search_call"}


def _blocks(content) -> list:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def claude_requests(path: Path) -> list[dict]:
    """One Anthropic request per assistant message id, main chain only (sidechains skipped);
    a compaction boundary starts the conversation again."""
    session = path.stem
    conversation: list[dict] = []
    requests: list[dict] = []
    seen: dict[str, dict] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("type") == "system" and entry.get("subtype") == "compact_boundary":
            conversation, seen = [], {}
            continue
        message = entry.get("message")
        if entry.get("isSidechain") or not isinstance(message, dict):
            continue
        if entry.get("type") == "assistant":
            key = str(message.get("id"))
            if key in seen:
                seen[key]["content"] += _blocks(message.get("content"))
                continue
            if conversation and conversation[0]["role"] == "user":
                requests.append(_anthropic_body(session, conversation))
            seen[key] = {"role": "assistant", "content": _blocks(message.get("content"))}
            conversation.append(seen[key])
        elif entry.get("type") == "user":
            if conversation and conversation[-1]["role"] == "user":
                conversation[-1]["content"] += _blocks(message.get("content"))
            else:
                conversation.append({"role": "user", "content": _blocks(message.get("content"))})
    return requests


def _anthropic_body(session: str, conversation: list[dict]) -> dict:
    user_id = json.dumps({"device_id": "bench", "account_uuid": "", "session_id": session})
    return {"model": "claude-bench", "max_tokens": 32000,
            "system": [{"type": "text", "text": "You are Claude Code.",
                        "cache_control": {"type": "ephemeral"}}],
            "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
            "metadata": {"user_id": user_id},
            "messages": json.loads(json.dumps(conversation))}


def codex_requests(path: Path) -> list[dict]:
    """One Responses request per run of model items (what one model call produced)."""
    items: list[dict] = []
    requests: list[dict] = []
    instructions = "You are Codex."
    previous_model = False
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        payload = entry.get("payload")
        if entry.get("type") == "session_meta" and isinstance(payload, dict):
            instructions = str(payload.get("instructions") or instructions)
        elif entry.get("type") == "compacted" and isinstance(payload, dict):
            items = list(payload.get("replacement_history") or [])
            previous_model = False
        elif entry.get("type") == "response_item" and isinstance(payload, dict):
            kind = payload.get("type")
            is_model = kind in MODEL_ITEMS or (kind == "message"
                                               and payload.get("role") == "assistant")
            if is_model and not previous_model and items:
                requests.append({"model": "gpt-bench", "instructions": instructions,
                                 "input": json.loads(json.dumps(items)), "stream": False,
                                 "store": False, "prompt_cache_key": path.stem})
            items.append(payload)
            previous_model = is_model
    return requests


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def json_floor(raw: bytes, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        json.dumps(json.loads(raw))
        best = min(best, time.perf_counter() - start)
    return best


def wire_work(raw: bytes, route: str, repeat: int = 3) -> float:
    """The proxy's own body work without select_context: read the body with its spans, key the
    conversation, splice a window (the newer half of the conversation) back in."""
    api = wire.ANTHROPIC if route == "/v1/messages" else wire.RESPONSES
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        body = wire.read_body(raw, api.field)
        wire.conversation_key(api, body.value, {})
        conversation = body.value[api.field]
        wire.splice(body, api.field, conversation[len(conversation) // 2:])
        best = min(best, time.perf_counter() - start)
    return best


def timed(client: httpx.Client, url: str, raw: bytes, headers: dict) -> float:
    start = time.perf_counter()
    response = client.post(url, content=raw, headers=headers)
    response.read()
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, response.status_code
    return elapsed


def slope(sizes: list[float], values: list[float]) -> float:
    """Least-squares growth of ``values`` per unit of ``sizes``."""
    n = len(sizes)
    mean_x, mean_y = sum(sizes) / n, sum(values) / n
    spread = sum((x - mean_x) ** 2 for x in sizes)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes, values, strict=True)) / spread


def replay(api: str, turns: int, paging: bool) -> None:
    """Upstream's workload as growing requests, three ways in turn per request: direct to the
    provider, through the plain hop, through the proxy (``make_app``, the real command's app)."""
    import argparse as _argparse

    from context_paging.server.proxy.commands import make_app

    from bench.proxy_work import Command, Hop, Sink, growing, headers_of, path_of

    def fresh_proxy(upstream: str):
        work = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
        home, empty = work / "home", work / "none"
        home.mkdir()
        (home / "config.toml").write_text(
            f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
            f'[paging]\nenabled = {"true" if paging else "false"}\n')
        args = _argparse.Namespace(upstream_anthropic=upstream, upstream_openai=upstream)
        app, history = make_app(load_settings(home=str(home)), args)
        command = Command(app)
        try:  # the command settles its collector once loaded (older versions did not)
            from context_paging.server import heap
        except ImportError:
            pass
        else:
            heap.settle()
        return command, history

    provider = Sink()
    sink = Served(provider)
    hop = Command(Hop(sink.url))
    proxy, history = fresh_proxy(sink.url)
    route, headers = path_of(api), headers_of(api)
    sizes, direct, hopped, proxied = [], [], [], []
    with httpx.Client(timeout=600) as client:
        for raw in growing(api, turns):
            sizes.append(len(raw) / (1 << 20))
            proxied.append(timed(client, proxy.url + route, raw, headers))
            forwarded = provider.sizes[-1]
            direct.append(timed(client, sink.url + route, raw, headers))
            hopped.append(timed(client, hop.url + route, raw, headers))
        proxy.close()
        history.close()
        # The whole conversation as the first request a fresh proxy sees (after a restart).
        proxy, history = fresh_proxy(sink.url)
        whole_first = timed(client, proxy.url + route, raw, headers)
        whole_again = timed(client, proxy.url + route, raw, headers)
    proxy.close()
    hop.close()
    sink.close()
    history.close()
    added = [p - d for p, d in zip(proxied, direct, strict=True)]
    hop_added = [h - d for h, d in zip(hopped, direct, strict=True)]
    ms = 1000
    import context_paging.server.proxy.app as code

    print(f"code: {Path(code.__file__).resolve().parent.parent}")
    print(f"upstream's workload as {len(sizes)} growing {api} requests "
          f"({sizes[0] * 1024:.0f} KB to {sizes[-1]:.1f} MB), paging {'on' if paging else 'off'}"
          ", default settings; ms per request")
    print(f"{'':<22} {'p50':>8} {'p95':>8} {'ms/MB':>7} {'first':>8}")
    for label, values in (("direct to provider", direct), ("plain hop, added", hop_added),
                          ("proxy, added", added)):
        print(f"{label:<22} {percentile(values, .5) * ms:>8.1f} "
              f"{percentile(values, .95) * ms:>8.1f} {slope(sizes, values) * ms:>7.2f} "
              f"{values[0] * ms:>8.1f}")
    work_only = [a - h for a, h in zip(added, hop_added, strict=True)]
    print(f"{'paging work alone':<22} {percentile(work_only, .5) * ms:>8.1f} "
          f"{percentile(work_only, .95) * ms:>8.1f} {slope(sizes, work_only) * ms:>7.2f} "
          f"{work_only[0] * ms:>8.1f}   (proxy added - plain hop added)")
    print(f"the last body ({sizes[-1]:.1f} MB) as a fresh proxy's first request: "
          f"{whole_first * ms:.0f} ms; the same body again: {whole_again * ms:.0f} ms")
    print(f"last request: {sizes[-1]:.1f} MB in, {forwarded / (1 << 20):.2f} MB forwarded")
    ratio = percentile(added, .5) / percentile(hop_added, .5)
    print(f"proxy added / plain hop added: p50 {ratio:.2f}x (goal <= 2), growth "
          f"{slope(sizes, added) * ms:.2f} ms/MB (goal <= 2), first request through the proxy "
          f"{proxied[0] * ms:.0f} ms (goal <= 1500)")


def phases(api_name: str, turns: int, idle: float = 0.0) -> None:
    """The proxy's own steps per request, in process CPU time, over the growing workload;
    with ``idle``, ``History.idle`` gets that many seconds after each request (the spare time
    the proxy has while the provider answers), timed as a step of its own."""
    import argparse as _argparse

    import context_paging.server.proxy.app as code
    from context_paging.server.proxy.commands import make_app

    from bench.proxy_work import growing, headers_of

    work = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    home, empty = work / "home", work / "none"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n')
    args = _argparse.Namespace(upstream_anthropic="http://127.0.0.1:9",
                               upstream_openai="http://127.0.0.1:9")
    app, history = make_app(load_settings(home=str(home)), args)
    api = wire.ANTHROPIC if api_name == "anthropic" else wire.RESPONSES
    steps: dict[str, list[tuple[float, float]]] = {}
    size = [0.0]

    def timed(name: str, function):
        def step(*args, **kwargs):
            start = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                steps.setdefault(name, []).append((size[0], time.process_time() - start))
        return step

    app.bodies.read = timed("read against the last body", app.bodies.read)
    app._conversation = timed("conversation key", app._conversation)
    app.select = timed("select_context", app.select)
    if hasattr(app, "_recovery_tools"):
        app._recovery_tools = timed("recovery-tools check", app._recovery_tools)
    else:  # a checkout from before the check looked only at new items
        code.has_recovery_tools = timed("recovery-tools check", code.has_recovery_tools)
    splice = code.wire.splice
    code.wire.splice = timed("splice", splice)
    headers = headers_of(api_name)
    try:
        for raw in growing(api_name, turns):
            size[0] = len(raw) / (1 << 20)
            out, note, _ = timed("_page, all of it", app._page)(api, raw, headers)
            if note is not None:
                timed("stats note", note)()
            if idle:
                timed("idle (after the reply)", history.idle)(idle, lambda: False)
    finally:
        code.wire.splice = splice
        history.close()
    ms = 1000
    print(f"code: {Path(code.__file__).resolve().parent.parent}")
    print(f"{turns} growing {api_name} requests through the proxy's _page, no HTTP; "
          "process CPU ms per request")
    print(f"{'step':<28} {'p50':>7} {'p95':>7} {'ms/MB':>7}")
    for name, rows in steps.items():
        values = [v for _, v in rows]
        print(f"{name:<28} {percentile(values, .5) * ms:>7.2f} "
              f"{percentile(values, .95) * ms:>7.2f} "
              f"{slope([s for s, _ in rows], values) * ms:>7.3f}")


def run_fixtures(budget: int, estimator: str, repeat: int, distill: bool) -> None:
    work = Path(tempfile.mkdtemp(prefix="proxy-bench-"))
    home = work / "home"
    home.mkdir()
    empty = work / "none"
    (home / "config.toml").write_text(
        f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
        f'[paging]\ntoken_budget = {budget}\nestimator = "{estimator}"\n'
        f'[distill]\nenabled = {"true" if distill else "false"}\n')
    history = make_history(load_settings(home=str(home)))
    provider = FakeProvider()
    upstream = Served(provider)
    proxy = Served(Proxy(history.select_context,
                         Upstreams(anthropic=upstream.url, openai=upstream.url),
                         ProxyLog(home)), lifespan="on")
    headers = {"x-api-key": "bench", "anthropic-version": "2023-06-01",
               "content-type": "application/json"}
    cases = [(p, "/v1/messages", claude_requests(p))
             for p in sorted((FIXTURES / "claude-code").glob("*.jsonl"))]
    cases += [(p, "/v1/responses", codex_requests(p))
              for p in sorted((FIXTURES / "codex").glob("*.jsonl"))]
    rows = []
    all_added, all_floor, all_hop, all_wire = [], [], [], []
    total_sent = total_full = 0
    with httpx.Client(timeout=60) as client:
        for path, route, requests in cases:
            if not requests:
                continue
            added, floors, hops = [], [], []
            sent = full = 0
            for _ in range(repeat):
                for body in requests:
                    raw = json.dumps(body).encode()
                    before = len(provider.requests)
                    direct = timed(client, upstream.url + route, raw, headers)
                    proxied = timed(client, proxy.url + route, raw, headers)
                    forwarded = provider.requests[before + 1].body
                    count = route + "/count_tokens" if route == "/v1/messages" else "/v1/other"
                    hop = (timed(client, proxy.url + count, raw, headers)
                           - timed(client, upstream.url + count, raw, headers))
                    added.append(proxied - direct)
                    hops.append(hop)
                    floors.append(json_floor(raw))
                    all_wire.append(wire_work(raw, route))
                    sent += len(forwarded) // 4
                    full += len(raw) // 4
            rows.append((path.name[:48], len(requests), percentile(added, .5),
                         percentile(added, .95), percentile(hops, .5),
                         percentile(floors, .5), sent, full))
            all_added += added
            all_floor += floors
            all_hop += hops
            total_sent += sent
            total_full += full
    proxy.close()
    upstream.close()
    history.close()
    ms = 1000
    print(f"budget {budget:,} tokens, estimator {estimator}, distillation "
          f"{'on' if distill else 'off'}, {repeat} pass(es); "
          "times in ms, per request")
    print(f"{'fixture':<48} {'req':>4} {'added p50':>9} {'p95':>7} {'hop p50':>7} "
          f"{'json p50':>8} {'ratio':>6} {'sent/full tokens':>20}")
    for name, count, p50, p95, hop, floor, sent, full in rows:
        print(f"{name:<48} {count:>4} {p50 * ms:>9.2f} {p95 * ms:>7.2f} {hop * ms:>7.2f} "
              f"{floor * ms:>8.2f} {p50 / floor:>6.1f} {f'{sent:,}/{full:,}':>20}")
    p50, p95 = percentile(all_added, .5), percentile(all_added, .95)
    floor50, floor95 = percentile(all_floor, .5), percentile(all_floor, .95)
    print(f"\nall {len(all_added)} requests: added p50 {p50 * ms:.2f} ms, p95 {p95 * ms:.2f} ms; "
          f"of which the HTTP hop p50 {percentile(all_hop, .5) * ms:.2f} ms; json.loads+dumps "
          f"p50 {floor50 * ms:.2f} ms, p95 {floor95 * ms:.2f} ms")
    print(f"added / json floor: p50 {p50 / floor50:.1f}x, p95 {p95 / floor95:.1f}x "
          f"(goal ≤ 1.5x); paging work alone (added − hop) p50 "
          f"{(p50 - percentile(all_hop, .5)) / floor50:.1f}x")
    wire50 = percentile(all_wire, .5)
    print(f"the proxy's own body work (read spans, key, splice) p50 {wire50 * ms:.2f} ms = "
          f"{wire50 / floor50:.2f}x json; the rest of the paging work is select_context")
    print(f"tokens sent {total_sent:,} of {total_full:,} in full history "
          f"({(1 - total_sent / max(1, total_full)) * 100:.1f}% less)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--api", choices=("anthropic", "responses"), default="anthropic")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--paging-off", action="store_true", help="paging.enabled = false")
    parser.add_argument("--phases", action="store_true",
                        help="the proxy's own steps in process, no HTTP (CPU time)")
    parser.add_argument("--idle", type=float, default=0.0, metavar="SECONDS",
                        help="--phases: spare time given to History.idle after each request")
    parser.add_argument("--fixtures", action="store_true",
                        help="replay the recorded sessions instead (the older figure)")
    parser.add_argument("--budget", type=int, default=16_000)
    parser.add_argument("--estimator", choices=("chars4", "tiktoken"), default="chars4")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-distill", action="store_true", help="paging only")
    args = parser.parse_args()
    if args.phases:
        phases(args.api, args.turns, args.idle)
    elif args.fixtures:
        run_fixtures(args.budget, args.estimator, args.repeat, not args.no_distill)
    else:
        replay(args.api, args.turns, not args.paging_off)


if __name__ == "__main__":
    main()
