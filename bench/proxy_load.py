"""Large bodies through ``context-paging proxy``: time and peak memory, and what another
conversation waits meanwhile.

Each figure comes from a fresh proxy process (``python -m context_paging proxy``, so a checkout
on ``PYTHONPATH`` is the code measured) in front of a provider that only counts
(bench/proxy_work.py):

* for 1, 10 and 40 MB bodies (one tool output that large): the seconds the request takes
  through the proxy and straight to the provider, and the proxy's peak resident memory
  (VmHWM) above its baseline after start-up, also as a multiple of the body;
* the wait: a 25 MB request of one conversation is sent, and while it is under way another
  conversation sends a small request every ``--pause`` seconds; printed are the small requests'
  median and longest time, against the same small request alone (``--wait-mb 0``: skipped);
* the first request: from starting the proxy to the answer of a 53 KB request sent as soon as
  the port accepts connections.

``--conversations N``: instead of the tables above, the added latency of many conversations at
once: one proxy process, one conversation alone, then N conversations at once, each sending its
growing requests (``--turns``, a ``--turn-kb`` tool output a turn: bodies to about 360 KB by
default) one after another, each after a pause drawn between 0 and twice ``--pause`` seconds
(default none: back to back), the provider answering after ``--think`` seconds. A request's
added latency is its time through the proxy less the same request's time straight to the
provider, sent the same way (alone, or N at once); printed side by side: p50 and p95 of each,
the proxy process's CPU time per request, and the ratio of N at once to alone. Alone and at
once take turns ``--repeat`` times (new conversations each round), so that the machine's other
load weighs on both alike.

``--limit-mb`` sets ``paging.max_request_bytes`` (default 64, so every body here is paged);
``--limit-mb 32`` (the default setting) shows the 40 MB body streamed through unpaged.
``--address-limit-mb N`` runs the proxy under that address-space limit (``--sizes 120
--limit-mb 128 --address-limit-mb 1500``: a body that once crashed it).

    python bench/proxy_load.py [--sizes 1 10 40 | --sizes 0 (none)] [--limit-mb 64]
                               [--wait-mb 25 | --wait-mb 0 (none)] [--pause 0.25]
                               [--address-limit-mb 1500]
    python bench/proxy_load.py --conversations 8 [--turns 40] [--turn-kb 8] [--think 0]
                               [--pause 0 (back to back)] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2 as httpx  # noqa: E402

from bench.proxy_work import ANTHROPIC_HEADERS as HEADERS  # noqa: E402
from bench.proxy_work import Sink, anthropic_body, anthropic_turn, big_body  # noqa: E402
from tests.fake_provider import Served  # noqa: E402

MB = 1 << 20
PAUSE = 0.25  # --pause's default
ADDRESS_LIMIT: list[int] = []  # --address-limit-mb, for the proxy processes


def memory(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for {pid}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class ProxyProcess:
    def __init__(self, upstream: str, limit_mb: int, first: bytes | None = None) -> None:
        """Start the proxy; with ``first``, that body is sent as soon as the port accepts it
        (retried until it does), and ``self.first`` is the seconds from start to its answer."""
        self.home = Path(tempfile.mkdtemp(prefix="proxy-load-"))
        empty = self.home / "none"
        (self.home / "config.toml").write_text(
            f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n'
            f"[paging]\nmax_request_bytes = {limit_mb * MB}\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = dict(os.environ, CONTEXT_PAGING_HOME=str(self.home),
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
        self.process = subprocess.Popen(
            [sys.executable, "-m", "context_paging", "proxy", "--port", str(self.port),
             "--upstream-anthropic", upstream, "--upstream-openai", upstream],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_limited)
        started = time.perf_counter()
        deadline = time.monotonic() + 120
        # One client for every attempt: a new one per attempt builds its TLS context each time
        # (tens of ms of CPU), which competed with the starting proxy for the machine's cores.
        with httpx.Client(timeout=60) as client:
            while time.monotonic() < deadline:
                try:
                    if first is not None:
                        response = client.post(self.url + "/v1/messages", content=first,
                                               headers=HEADERS)
                    else:
                        response = client.get(self.url + "/_context-paging/health", timeout=2)
                    if response.status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.01)
            else:
                raise SystemExit("the proxy did not start")
        self.first = time.perf_counter() - started
        small = anthropic_body(anthropic_turn(0)[:1], "warm-up")
        httpx.post(self.url + "/v1/messages", content=small, headers=HEADERS, timeout=60)
        self.baseline = memory(self.process.pid, "VmHWM")

    def peak(self) -> int:
        return memory(self.process.pid, "VmHWM") - self.baseline

    def close(self) -> str:
        self.process.terminate()
        try:
            _, err = self.process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
        return err.decode(errors="replace")


def cpu_seconds(pid: int) -> float:
    """The process's user and system CPU time so far, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _limited() -> None:
    if ADDRESS_LIMIT:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT[0], ADDRESS_LIMIT[0]))


def post(url: str, raw: bytes) -> float:
    start = time.perf_counter()
    response = httpx.post(url + "/v1/messages", content=raw, headers=HEADERS, timeout=600)
    assert response.status_code == 200, response.status_code
    return time.perf_counter() - start


def sizes_table(sink_url: str, sizes: list[float], limit_mb: int) -> None:
    print(f"paging.max_request_bytes = {limit_mb} MB")
    print(f"{'body':>7} {'direct s':>9} {'proxy s':>8} {'peak MB':>8} {'peak/body':>9}  stderr")
    for size in sizes:
        raw = big_body(size, session=f"big-{size}")
        proxy = ProxyProcess(sink_url, limit_mb)
        try:
            took = post(proxy.url, raw)
            peak = proxy.peak()
        except httpx.HTTPError as exc:
            took, peak = float("nan"), 0
            print(f"  the proxy failed: {type(exc).__name__}, exit code {proxy.process.poll()}")
        finally:
            err = proxy.close()
        direct = post(sink_url, raw)
        lines = [line for line in err.splitlines() if "proxy on http" not in line]
        print(f"{len(raw) / MB:>6.1f}M {direct:>9.2f} {took:>8.2f} {peak / MB:>8.0f} "
              f"{peak / len(raw):>9.1f}  {lines[-1][:70] if lines else ''}", flush=True)


def first_table(sink_url: str, limit_mb: int) -> None:
    small = anthropic_body(anthropic_turn(0), "first")
    times = []
    for _ in range(3):
        proxy = ProxyProcess(sink_url, limit_mb, first=small)
        times.append(proxy.first)
        proxy.close()
    print(f"\nfrom starting the proxy to the answer of its first request ({len(small) // 1024} KB),"
          f" sent as soon as the port accepts it: median of 3 {statistics.median(times):.2f} s")


def wait_table(sink_url: str, wait_mb: float, limit_mb: int, pause: float) -> None:
    proxy = ProxyProcess(sink_url, limit_mb)
    small = anthropic_body(anthropic_turn(1)[:1], "small-conversation")
    try:
        alone = statistics.median(post(proxy.url, small) for _ in range(5))
        large = big_body(wait_mb, session="large-conversation")
        took: list[float] = []
        sender = threading.Thread(target=lambda: took.append(post(proxy.url, large)))
        sender.start()
        time.sleep(0.2)  # the large body is on its way
        waits = []
        while sender.is_alive():
            waits.append(post(proxy.url, small))
            time.sleep(pause)  # an agent's next request comes after the model's answer
        sender.join()
    finally:
        proxy.close()
    print(f"\nwhile one conversation's {wait_mb:.0f} MB request took {took[0]:.2f} s, another's "
          f"{len(waits)} small requests took median {statistics.median(waits) * 1000:.0f} ms, "
          f"longest {max(waits) * 1000:.0f} ms (alone: {alone * 1000:.0f} ms)")


class Thinking(Sink):
    """The counting provider, answering ``think`` seconds after the body has arrived."""

    def __init__(self, think: float) -> None:
        super().__init__()
        self.think = think

    async def __call__(self, scope, receive, send) -> None:
        if self.think and scope["type"] == "http":
            import anyio

            await anyio.sleep(self.think)  # before reading: the proxy's upload is done by then
        await super().__call__(scope, receive, send)


def conversation_bodies(tag: str, turns: int, turn_kb: float) -> list[bytes]:
    """One conversation's growing requests, its own from the first message on (``tag``)."""
    from bench.select_bench import turn

    conversation: list[dict] = []
    bodies = []
    for n in range(turns):
        user, _, result = turn(n, int(turn_kb * 1024))
        call = f"toolu_{tag}_{n:04d}"
        conversation += [
            {"role": "user", "content": f"{tag}: {user['content']}"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": call, "name": "read",
                                               "input": {"path": f"src/{tag}/{n}.ts"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call,
                                          "content": result["content"][0]["text"]}]}]
        bodies.append(anthropic_body(conversation, session=f"session-{tag}"))
    return bodies


def run_at_once(url: str, conversations: list[list[bytes]], pause: float = 0.0
                ) -> list[list[float]]:
    """Each conversation on a thread of its own, its requests in turn, each after a pause drawn
    between 0 and ``2 * pause`` seconds (the same draws on every run); the seconds of each."""
    times: list[list[float]] = [[] for _ in conversations]
    start = threading.Barrier(len(conversations))

    def one(index: int) -> None:
        import random

        pauses = random.Random(index)
        with httpx.Client(timeout=600) as client:
            start.wait()
            for raw in conversations[index]:
                if pause:
                    time.sleep(pauses.uniform(0, 2 * pause))
                began = time.perf_counter()
                response = client.post(url + "/v1/messages", content=raw, headers=HEADERS)
                times[index].append(time.perf_counter() - began)
                assert response.status_code == 200, response.status_code

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(conversations))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return times


def concurrency_table(conversations: int, turns: int, turn_kb: float, think: float,
                      pause: float, limit_mb: int, repeat: int) -> None:
    """Alone and N at once in turn, ``repeat`` times (new conversations each time), so that
    the machine's other load weighs on both alike; the figures pool every round."""
    figures: dict[str, tuple[list[float], list[float]]] = {}
    cpu: dict[str, list[float]] = {}  # the proxy's CPU seconds per request, per round
    with Served(Thinking(think)) as sink:
        proxy = ProxyProcess(sink.url, limit_mb)
        try:
            for round_ in range(repeat):
                alone = [conversation_bodies(f"alone-{round_}", turns, turn_kb)]
                many = [conversation_bodies(f"c{i}-{round_}", turns, turn_kb)
                        for i in range(conversations)]
                for label, group in (("1 alone", alone), (f"{conversations} at once", many)):
                    direct = run_at_once(sink.url, group, pause)
                    before = cpu_seconds(proxy.process.pid)
                    proxied = run_at_once(proxy.url, group, pause)
                    cpu.setdefault(label, []).append(
                        (cpu_seconds(proxy.process.pid) - before) / sum(map(len, group)))
                    added, flat = figures.setdefault(label, ([], []))
                    added += [p - d for ps, ds in zip(proxied, direct, strict=True)
                              for p, d in zip(ps, ds, strict=True)]
                    flat += [d for ds in direct for d in ds]
        finally:
            err = proxy.close()
    largest = max(len(raw) for raw in many[0]) / 1024
    print(f"{conversations} conversations at once against 1 alone, one proxy process, "
          f"{turns} growing requests each (to {largest:.0f} KB), provider think {think:g} s, "
          f"pause before each request 0-{2 * pause:g} s, {repeat} rounds, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}; ms")
    print(f"{'':<14} {'added p50':>9} {'added p95':>9} {'direct p50':>10} {'direct p95':>10} "
          f"{'proxy CPU/request':>17}")
    for label, (added, flat) in figures.items():
        print(f"{label:<14} {percentile(added, .5) * 1000:>9.1f} "
              f"{percentile(added, .95) * 1000:>9.1f} {percentile(flat, .5) * 1000:>10.1f} "
              f"{percentile(flat, .95) * 1000:>10.1f} "
              f"{statistics.median(cpu[label]) * 1000:>17.1f}")
    (one, _), (together, _) = figures.values()
    p50 = percentile(together, .5) / percentile(one, .5)
    p95 = percentile(together, .95) / percentile(one, .95)
    print(f"added, {conversations} at once / alone: p50 {p50:.2f}x, p95 {p95:.2f}x "
          "(goal: p50 <= 2x)")
    problems = [line for line in err.splitlines()
                if "proxy on http" not in line and "live view at" not in line]
    if problems:
        print("proxy stderr: " + problems[-1][:200])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 10, 40])
    parser.add_argument("--limit-mb", type=int, default=64)
    parser.add_argument("--wait-mb", type=float, default=25)
    parser.add_argument("--address-limit-mb", type=int, default=0,
                        help="run the proxy under this address-space limit (RLIMIT_AS)")
    parser.add_argument("--pause", type=float, default=None,
                        help="seconds between the other conversation's small requests; with "
                        "--conversations, the mean pause before each request (default none)")
    parser.add_argument("--conversations", type=int, default=0,
                        help="only the table of this many conversations at once against one")
    parser.add_argument("--turns", type=int, default=40, help="--conversations: requests each")
    parser.add_argument("--turn-kb", type=float, default=8.0,
                        help="--conversations: the tool output each turn adds")
    parser.add_argument("--repeat", type=int, default=3,
                        help="--conversations: rounds of alone and at once, in turn")
    parser.add_argument("--think", type=float, default=0.0,
                        help="--conversations: seconds the provider takes to answer")
    args = parser.parse_args()
    if args.address_limit_mb:
        ADDRESS_LIMIT.append(args.address_limit_mb * MB)
    import context_paging.server.proxy.app as code

    print(f"code: {Path(code.__file__).resolve().parent.parent}")
    if args.conversations:
        concurrency_table(args.conversations, args.turns, args.turn_kb, args.think,
                          args.pause or 0.0, args.limit_mb, args.repeat)
        return
    with Served(Sink()) as sink:
        if args.sizes != [0]:
            sizes_table(sink.url, args.sizes, args.limit_mb)
        if args.wait_mb > 0:
            wait_table(sink.url, args.wait_mb, args.limit_mb,
                       PAUSE if args.pause is None else args.pause)
        first_table(sink.url, args.limit_mb)


if __name__ == "__main__":
    main()
