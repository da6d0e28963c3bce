"""Receiving a large request body on the proxy's HTTP server, by how much each socket read asks.

Each variant is the server class ``context-paging proxy`` uses (server/proxy/connections.py) with
another read size, serving an app that reads the body through Starlette as the proxy does and
answers with the number of pieces it came in. A 15 MB and a 50 KB body are posted to each in
turn, interleaved, ``--rounds`` times; printed per variant: the pieces, the best and the median
time of the large body less the small one, per MB (the client's sending included, the same for
every variant), and the small body's median. The last variant repeats the first, to show the
drift of the run.

    python bench/proxy_receive.py [--rounds 15] [--mb 15]
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2 as httpx  # noqa: E402
import uvicorn  # noqa: E402
from context_paging.server.proxy import connections  # noqa: E402
from starlette.requests import Request  # noqa: E402

ASYNCIO_DEFAULT = 256 << 10


async def reader(scope, receive, send) -> None:
    if scope["type"] != "http":
        return
    pieces = [chunk async for chunk in Request(scope, receive).stream()]
    b"".join(pieces)
    out = str(len(pieces)).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(out)).encode())]})
    await send({"type": "http.response.body", "body": out})


def protocol(read_size: int) -> type:
    class Sized(connections.HeaderDeadline):
        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            transport.max_size = read_size

    return Sized


def serve(read_size: int) -> str:
    sock = socket.socket()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    config = uvicorn.Config(reader, lifespan="off", log_config=None, access_log=False,
                            http=protocol(read_size), loop="asyncio", log_level="warning")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--mb", type=float, default=15)
    args = parser.parse_args()
    sizes = [ASYNCIO_DEFAULT, 1 << 20, connections.READ_SIZE, 2 * connections.READ_SIZE,
             ASYNCIO_DEFAULT]
    urls = [serve(size) for size in sizes]
    time.sleep(0.5)
    small, big = b"x" * 50_000, b"x" * int(args.mb * (1 << 20))
    times: list[dict[str, list[float]]] = [{"small": [], "big": []} for _ in sizes]
    pieces = [""] * len(sizes)
    with httpx.Client(timeout=60) as client:
        for _ in range(args.rounds):
            for index, url in enumerate(urls):
                for label, body in (("small", small), ("big", big)):
                    start = time.perf_counter()
                    reply = client.post(url, content=body)
                    times[index][label].append(time.perf_counter() - start)
                    if label == "big":
                        pieces[index] = reply.text
    mb = len(big) / (1 << 20)
    print(f"a {mb:.1f} MB body less a 50 KB one, {args.rounds} interleaved rounds")
    print(f"{'read size':>12} {'pieces':>7} {'best ms/MB':>11} {'median ms/MB':>13} "
          f"{'50 KB median ms':>16}")
    for size, row, count in zip(sizes, times, pieces, strict=True):
        best = (min(row["big"]) - min(row["small"])) * 1000 / mb
        median = (statistics.median(row["big"]) - statistics.median(row["small"])) * 1000 / mb
        print(f"{size >> 10:>9} KiB {count:>7} {best:>11.2f} {median:>13.2f} "
              f"{statistics.median(row['small']) * 1000:>16.2f}")


if __name__ == "__main__":
    main()
