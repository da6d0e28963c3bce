"""The proxy's added latency with the live view open and polling, against closed, in one run.

The proxy is built and served as ``context-paging proxy`` builds it (``make_app``: the view
mounted, the guard, the server settings) over the fake provider; one Claude Code-like
conversation (tests/test_proxy.py's, 600 tool turns by default, paged at a 16,000-token budget)
is sent request by request. Each request is sent to the provider directly and then through the
proxy; the difference is the proxy's added latency. The requests go in blocks of ten, and each
block is sent with the view closed, with a poller doing what the page does (the conversations
twice a second, a conversation's figures, chart and turns whenever its request count changed), or
with the same poller polling back to back (a stress figure); the blocks rotate, so the three see
requests of the same sizes. Printed: p50 and p95 of the added latency per case, in ms.

    python bench/view_bench.py [--turns 600] [--budget 16000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2 as httpx  # noqa: E402
from context_paging.index.home.proxied import view_token  # noqa: E402
from context_paging.server.config import load_settings  # noqa: E402
from context_paging.server.proxy import commands as proxy_cli  # noqa: E402

from tests.fake_provider import FakeProvider, Served  # noqa: E402
from tests.test_proxy import SYSTEM, TOOLS, USER_ID, claude_code_conversation  # noqa: E402

API = "/context-paging/api/conversations"
HEADERS = {"x-api-key": "sk-ant-bench", "anthropic-version": "2023-06-01",
           "content-type": "application/json", "user-agent": "claude-cli/2.1.90"}


class Poller:
    """What the open page does: the list every ``interval``; the conversation's figures and
    turns when its request count changed."""

    def __init__(self, url: str, token: str) -> None:
        self.client = httpx.Client(base_url=url, timeout=30,
                                   headers={"authorization": f"Bearer {token}",
                                            "sec-fetch-site": "same-origin"})
        self.interval: float | None = None
        self.stop = threading.Event()
        self.polls: dict[float, int] = {}
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self) -> None:
        seen, last = -1, 0.0
        while not self.stop.is_set():
            interval = self.interval
            if interval is None or time.monotonic() < last + interval:
                time.sleep(0.005)
                continue
            last = time.monotonic()
            rows = self.client.get(API).json()["conversations"]
            self.polls[interval] = self.polls.get(interval, 0) + 1
            if rows and rows[0]["requests"] != seen:
                seen = rows[0]["requests"]
                ref = rows[0]["session"]
                self.client.get(f"{API}/{ref}").raise_for_status()
                self.client.get(f"{API}/{ref}/turns").raise_for_status()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        self.client.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=600)
    parser.add_argument("--budget", type=int, default=16000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        empty = Path(tmp) / "none"
        (home / "config.toml").write_text(
            f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
            f"[paging]\ntoken_budget = {args.budget}\n")
        settings = load_settings(home=str(home))
        upstream = Served(FakeProvider())
        app, history = proxy_cli.make_app(settings, argparse.Namespace(
            upstream_anthropic=upstream.url, upstream_openai=upstream.url))
        sock = proxy_cli.listen("127.0.0.1", 0)
        server = proxy_cli._server(app, sock)
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        poller = Poller(url, view_token(home))
        cases = {"closed": None, "page (2/s)": 0.5, "continuous": 0.0}
        added: dict[str, list[float]] = {name: [] for name in cases}
        try:
            with httpx.Client(timeout=60) as client:
                for index, messages in enumerate(claude_code_conversation(args.turns)):
                    name = list(cases)[(index // 10) % len(cases)]
                    poller.interval = cases[name]
                    body = json.dumps({"model": "claude-fake", "max_tokens": 64,
                                       "stream": True, "system": SYSTEM, "tools": TOOLS,
                                       "messages": messages,
                                       "metadata": {"user_id": USER_ID}}).encode()
                    times = []
                    for base in (upstream.url, url):
                        start = time.perf_counter()
                        reply = client.post(base + "/v1/messages", content=body,
                                            headers=HEADERS)
                        reply.read()
                        times.append(time.perf_counter() - start)
                        assert reply.status_code == 200, reply.text[:200]
                    added[name].append((times[1] - times[0]) * 1000)
        finally:
            poller.close()
            server.should_exit = True
            thread.join(timeout=30)
            sock.close()
            app.view.close()
            history.close()
            upstream.close()
        requests = sum(len(v) for v in added.values())
        print(f"{requests} requests (budget {args.budget:,}); the proxy's added latency per "
              "request, ms, with the view:")
        for name, values in added.items():
            polls = poller.polls.get(cases[name], 0) if cases[name] is not None else 0
            print(f"  {name:<11} n={len(values):<4} p50 {percentile(values, 0.5):6.2f}   "
                  f"p95 {percentile(values, 0.95):6.2f}   ({polls} polls of the list)")


if __name__ == "__main__":
    main()
