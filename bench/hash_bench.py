"""Serializing and hashing select_context's request, side by side in one run.

On select_bench's workload (901 messages, 15 MiB of tool output), each figure the best of
``--repeat`` runs and a ratio to the JSON floor (``json.loads(json.dumps(messages))``) timed in
the same run:

* canonical form of every message (the fingerprint's input): the json module, orjson, and
  ``index.canonical.canonical`` (orjson where it writes the same bytes);
* a hash of those bytes: hashlib's sha256 (today's fingerprint), sha1, md5, blake2b, blake2s,
  and xxhash / blake3 when installed (optional: ``pip install xxhash blake3``; neither is a
  dependency);
* the ledger's lines for a first append: ``json.dumps(ensure_ascii=False)`` (the old writer)
  and ``index.jsonl.dump_line`` (orjson where it reads back alike).

    python bench/hash_bench.py [--repeat 7]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.select_bench import workload  # noqa: E402


def best(repeat: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def hashes() -> dict[str, Callable[[bytes], object]]:
    out: dict[str, Callable[[bytes], object]] = {
        "sha256 (today)": lambda b: hashlib.sha256(b).hexdigest(),
        "sha1": lambda b: hashlib.sha1(b).hexdigest(),
        "md5": lambda b: hashlib.md5(b).hexdigest(),
        "blake2b": lambda b: hashlib.blake2b(b).hexdigest(),
        "blake2s": lambda b: hashlib.blake2s(b).hexdigest(),
    }
    try:
        import xxhash

        out["xxhash xxh3_128"] = lambda b: xxhash.xxh3_128_hexdigest(b)
    except ImportError:
        print("(xxhash not installed: pip install xxhash to compare it)")
    try:
        import blake3

        out["blake3"] = lambda b: blake3.blake3(b).hexdigest()
    except ImportError:
        print("(blake3 not installed: pip install blake3 to compare it)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    from context_paging.index.canonical import canonical
    from context_paging.index.jsonl import dump_line

    messages = workload()
    floor = best(args.repeat, lambda: json.loads(json.dumps(messages)))
    size = sum(len(canonical(m)) for m in messages)
    print(f"workload: {len(messages)} messages, {size:,} bytes of canonical JSON")

    def show(label: str, seconds: float) -> None:
        print(f"{label:<44} {seconds * 1000:8.2f} ms   (x{seconds / floor:.3f} floor)")

    show("json.loads(json.dumps(messages)) [floor]", floor)
    print("-- canonical form of every message")
    show("json.dumps(sort_keys, compact)", best(args.repeat, lambda: [
        json.dumps(m, sort_keys=True, separators=(",", ":")).encode() for m in messages]))
    try:
        import orjson

        show("orjson.dumps(OPT_SORT_KEYS)", best(args.repeat, lambda: [
            orjson.dumps(m, option=orjson.OPT_SORT_KEYS) for m in messages]))
    except ImportError:
        pass
    show("index.canonical.canonical", best(args.repeat, lambda: [canonical(m) for m in messages]))
    print("-- a hash of every message's canonical bytes (one call per message)")
    data = [canonical(m) for m in messages]
    for name, fn in hashes().items():
        show(name, best(args.repeat, lambda fn=fn: [fn(b) for b in data]))
    print("-- the ledger's lines for a first append")
    records = [{"type": "message", "id": f"m{i:020d}", "parent": None if i == 0 else "m",
                "format": "pi", "ts": "2026-01-01T00:00:00.000Z", "message": m}
               for i, m in enumerate(messages)]
    show("json.dumps(ensure_ascii=False) (old)", best(args.repeat, lambda: b"".join(
        (json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")
        for r in records)))
    show("index.jsonl.dump_line", best(args.repeat, lambda: b"".join(
        dump_line(r) for r in records)))


if __name__ == "__main__":
    main()
