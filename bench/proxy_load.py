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

``--limit-mb`` sets ``paging.max_request_bytes`` (default 64, so every body here is paged);
``--limit-mb 32`` (the default setting) shows the 40 MB body streamed through unpaged.
``--address-limit-mb N`` runs the proxy under that address-space limit (``--sizes 120
--limit-mb 128 --address-limit-mb 1500``: a body that once crashed it).

    python bench/proxy_load.py [--sizes 1 10 40 | --sizes 0 (none)] [--limit-mb 64]
                               [--wait-mb 25 | --wait-mb 0 (none)] [--pause 0.25]
                               [--address-limit-mb 1500]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=float, nargs="+", default=[1, 10, 40])
    parser.add_argument("--limit-mb", type=int, default=64)
    parser.add_argument("--wait-mb", type=float, default=25)
    parser.add_argument("--address-limit-mb", type=int, default=0,
                        help="run the proxy under this address-space limit (RLIMIT_AS)")
    parser.add_argument("--pause", type=float, default=0.25,
                        help="seconds between the other conversation's small requests")
    args = parser.parse_args()
    if args.address_limit_mb:
        ADDRESS_LIMIT.append(args.address_limit_mb * MB)
    import context_paging.server.proxy.app as code

    print(f"code: {Path(code.__file__).resolve().parent.parent}")
    with Served(Sink()) as sink:
        if args.sizes != [0]:
            sizes_table(sink.url, args.sizes, args.limit_mb)
        if args.wait_mb > 0:
            wait_table(sink.url, args.wait_mb, args.limit_mb, args.pause)
        first_table(sink.url, args.limit_mb)


if __name__ == "__main__":
    main()
