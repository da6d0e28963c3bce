"""Write the bundled demo session (server/data/demo-session.jsonl), deterministically.

A Pi v3 session of a developer chasing a flaky checkout test in a small web shop: it reads files,
runs tests, greps logs, finds that Redis was not reachable, fixes the retry logic and lands the
change. Tool outputs range from a few lines to tens of kilobytes, so paging has real work to do.

    python bench/demo_session.py   # rewrites server/data/demo-session.jsonl
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parent.parent / "server" / "data" / "demo-session.jsonl"
CWD = "/home/dev/shop"


class Writer:
    def __init__(self) -> None:
        self.lines: list[dict] = []
        self.parent: str | None = None
        self.n = 0
        self.clock = 0

    def _entry(self, kind: str, **fields) -> str:
        self.n += 1
        self.clock += 7
        entry_id = f"{self.n:08x}"
        minutes, seconds = divmod(self.clock, 60)
        stamp = f"2026-11-20T09:{minutes:02d}:{seconds:02d}.000Z"
        self.lines.append({"type": kind, "id": entry_id, "parentId": self.parent,
                           "timestamp": stamp, **fields})
        self.parent = entry_id
        return entry_id

    def user(self, text: str) -> None:
        self._entry("message", message={"role": "user", "content": text, "timestamp": self.clock})

    def assistant(self, text: str | None, calls: list[tuple[str, str, dict]] = (),
                  thinking: str | None = None) -> None:
        content = []
        if thinking:
            content.append({"type": "thinking", "thinking": thinking,
                            "thinkingSignature": "sig-" + "x" * 24})
        if text:
            content.append({"type": "text", "text": text})
        for call_id, name, args in calls:
            content.append({"type": "toolCall", "id": call_id, "name": name, "arguments": args})
        self._entry("message", message={
            "role": "assistant", "content": content, "api": "anthropic-messages",
            "provider": "anthropic", "model": "claude-sonnet-4-5",
            "usage": {"input": 1200, "output": 180, "cacheRead": 9000, "cacheWrite": 400,
                      "totalTokens": 10780},
            "stopReason": "toolUse" if calls else "stop", "timestamp": self.clock,
        })

    def result(self, call_id: str, name: str, text: str, error: bool = False) -> None:
        self._entry("message", message={
            "role": "toolResult", "toolCallId": call_id, "toolName": name,
            "content": [{"type": "text", "text": text}], "isError": error,
            "timestamp": self.clock,
        })


def log_lines(rng: random.Random, count: int, needle_at: int | None = None) -> str:
    services = ["cart", "checkout", "payments", "inventory", "auth"]
    out = []
    for i in range(count):
        svc = rng.choice(services)
        ms = rng.randint(2, 900)
        line = (f"2026-11-19T23:{i // 60 % 60:02d}:{i % 60:02d}Z {svc:<9} INFO request "
                f"id=req-{rng.randrange(16**6):06x} status=200 took={ms}ms")
        if needle_at is not None and i == needle_at:
            line = ("2026-11-19T23:41:07Z checkout  ERROR redis connect failed: "
                    "ECONNREFUSED 127.0.0.1:6379 (attempt 3/3, pool=cart-cache)")
        out.append(line)
    return "\n".join(out)


def build() -> list[dict]:
    rng = random.Random(20261120)
    w = Writer()
    w._entry("session_info", name="Flaky checkout test")
    w.lines.insert(0, {"type": "session", "version": 3, "id": "demo-0f3c9a2e",
                       "timestamp": "2026-11-20T09:00:00.000Z", "cwd": CWD})
    w.user("The checkout integration test fails about one run in five on CI. "
           "Can you find out why and fix it?")
    w.assistant("I'll start with the test and the latest CI log.",
                [("call_01", "read", {"path": "tests/test_checkout.py"})],
                thinking="Flaky one in five: probably timing or an external service.")
    w.result("call_01", "read", "\n".join(
        [f"{i + 1}\t" + line for i, line in enumerate([
            "import pytest", "from shop.checkout import place_order", "",
            "@pytest.mark.integration", "def test_checkout_places_order(cart, redis_cache):",
            "    order = place_order(cart, cache=redis_cache)",
            "    assert order.status == 'placed'",
            "    assert redis_cache.get(f'order:{order.id}') is not None",
        ])]))
    w.assistant(None, [("call_02", "bash", {"command": "cat ci/logs/run-4812.log"})])
    w.result("call_02", "bash", log_lines(rng, 900, needle_at=611))
    w.assistant("Line 612 of the CI log shows `ECONNREFUSED 127.0.0.1:6379`: the cache was not "
                "up when checkout ran. Let me look at how the client connects.",
                [("call_03", "grep", {"pattern": "def connect", "path": "shop/cache.py"})])
    w.result("call_03", "grep", "shop/cache.py:14:def connect(url, retries=3, delay=0.05):")
    w.assistant(None, [("call_04", "read", {"path": "shop/cache.py"})])
    cache_py = [
        "import time", "import redis", "", "DEFAULT_URL = 'redis://127.0.0.1:6379/0'", "",
        "class CacheUnavailable(RuntimeError):", "    pass", "", "_client = None", "", "",
        "", "", "def connect(url, retries=3, delay=0.05):",
        "    for attempt in range(retries):", "        try:",
        "            client = redis.Redis.from_url(url)", "            client.ping()",
        "            return client", "        except redis.ConnectionError:",
        "            time.sleep(delay)",
        "    raise CacheUnavailable(f'redis unreachable at {url}')",
    ]
    w.result("call_04", "read", "\n".join(f"{i + 1}\t{t}" for i, t in enumerate(cache_py)))
    w.user("Interesting. How long does the Redis container take to start on CI?")
    w.assistant(None, [("call_05", "bash", {"command": "grep -n 'Ready to accept' ci/logs/*.log"})])
    w.result("call_05", "bash", "\n".join(
        f"ci/logs/run-{4800 + i}.log:{rng.randint(40, 90)}: redis  Ready to accept connections "
        f"tcp (after {rng.randint(80, 420)} ms)" for i in range(14)))
    w.assistant("Redis needs 80–420 ms to accept connections, but `connect()` gives up after "
                "3 attempts × 50 ms = 150 ms. That is the flake.")
    w.user("Make the retry wait long enough, with backoff, and keep the test fast locally.")
    w.assistant("I'll switch to exponential backoff capped at 2 s total.",
                [("call_06", "edit", {"path": "shop/cache.py",
                                      "oldText": "def connect(url, retries=3, delay=0.05):",
                                      "newText": "def connect(url, retries=8, delay=0.02, "
                                                 "max_wait=2.0):"})])
    w.result("call_06", "edit", "Edited shop/cache.py: 1 replacement.")
    w.assistant(None, [("call_07", "bash", {"command": "pytest -q tests/test_checkout.py -x"})])
    w.result("call_07", "bash", "F\n___ test_checkout_places_order ___\nTypeError: "
             "connect() got an unexpected keyword argument 'timeout' (shop/checkout.py:41)\n"
             "1 failed in 0.84s", error=True)
    w.assistant("`shop/checkout.py:41` passes `timeout=`; I'll rename it to `max_wait`.",
                [("call_08", "edit", {"path": "shop/checkout.py", "oldText": "timeout=1.0",
                                      "newText": "max_wait=1.0"})])
    w.result("call_08", "edit", "Edited shop/checkout.py: 1 replacement.")
    for run in range(20):
        call = f"call_{9 + run:02d}"
        command = f"pytest -q tests/ --count=25 --seed={run}"
        w.assistant(None, [(call, "bash", {"command": command})])
        lines = [f"tests/test_{name}.py " + "." * rng.randint(20, 60)
                 for name in ("cart", "checkout", "payments", "inventory", "auth") * 30]
        w.result(call, "bash", "\n".join(lines) + f"\n{rng.randint(700, 900)} passed in "
                 f"{rng.uniform(20, 40):.2f}s")
    w.assistant("All 20 seeded runs pass (25 repetitions each). The flake was the 150 ms retry "
                "window; Redis on CI needs up to 420 ms.")
    w.user("Great. Write the commit message and summarize what changed.")
    w.assistant("Commit: `cache: wait up to 2 s for Redis with exponential backoff`\n\n"
                "- shop/cache.py: connect() retries 8 times with backoff (max_wait=2.0)\n"
                "- shop/checkout.py: pass max_wait instead of timeout\n"
                "- Root cause: ECONNREFUSED on CI when Redis took >150 ms to start.")
    return w.lines


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with open(OUT, "w", encoding="utf-8") as handle:
        for line in build():
            handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
