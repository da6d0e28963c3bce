"""The first request that carries the provider's usage, in-process, next to the call before it.

Workload: upstream's benchmark conversation (bench/select_bench.py: 300 turns, 15 MiB of tool
output), default settings with the model window at the budget (128,000). Each figure starts from a
fresh home and a fresh service, as a proxy that restarts (or meets a conversation for the first
time) does:

* ``first``: the whole conversation, no usage (what the provider's usage will describe);
* ``again + usage``: the same conversation again with the provider's usage of that window (the
  proxy bench's "the same body again, now with the provider's usage": no response follows the
  window's last message, so nothing is calibrated, but usage is given);
* ``next + usage``: the conversation up to its last request first, then with the response (the
  assistant's tool call) and its output, and the usage of that window: the response follows the
  window, so the request is calibrated (usage 8 % above the window's estimate, so the
  per-message weights are scaled too).

``--proxy anthropic|responses`` times the same through ``context-paging proxy`` as the command
builds it (bench/proxy_bench.py's last rows), against a provider that only counts (its usage:
the forwarded body's characters / 4): the whole 15.2 MB conversation as a fresh proxy's first
request, the same body again (now with the provider's usage), and the next turn.

Best of ``--repeat`` runs per figure, in this process's CPU time with ``--clock cpu`` (every
thread, as the machine is shared). ``--before DIR`` times the same figures of another checkout
(``git archive <commit> | tar -x -C DIR``) in a child process after each run of this code, so the
two columns are measured side by side; the ratio column is before ÷ after.

    python bench/calibrate_bench.py [--repeat 3] [--clock cpu|wall] [--before DIR]
                                    [--proxy anthropic|responses]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

FIGURES = ("first", "again + usage", "next + usage")
PROXY_FIGURES = ("proxy: first", "proxy: again", "proxy: next turn")


def run_once(clock) -> dict[str, float]:
    """One run of every figure: seconds per figure."""
    from context_paging.index.ledger import Ledger
    from context_paging.index.window.pipeline import ContextService, ContextSettings
    from context_paging.server.tokens import text_counter
    from select_bench import _call_args, workload

    counter = text_counter()
    messages = workload()
    # the last request, then its response (the assistant's call) and the call's output
    before_last, with_response = messages[:-3], messages[:-1]
    out: dict[str, float] = {}

    def timed(svc, call) -> tuple[float, dict]:
        start = clock()
        reply = svc.select(**call)
        return clock() - start, reply

    def usage_of(reply: dict) -> dict[str, int]:
        return {"input_tokens": int(reply["estimated_tokens"] * 1.08), "output_tokens": 40}

    for figure, first_messages, second_messages in (
            ("again + usage", messages, messages), ("next + usage", before_last, with_response)):
        home = Path(tempfile.mkdtemp(prefix="calibrate-bench-"))
        try:
            svc = ContextService(Ledger(home), ContextSettings(token_budget=128_000), counter)
            seconds, reply = timed(svc, _call_args(first_messages))
            if figure == "again + usage":
                out["first"] = seconds
            # no spare time between the two: the proxy's second request follows at once
            seconds, _ = timed(svc, _call_args(second_messages) | {"usage": usage_of(reply)})
            out[figure] = seconds
        finally:
            shutil.rmtree(home, ignore_errors=True)
    return out


def run_proxy(api: str, clock) -> dict[str, float]:
    """The three proxy figures, through a fresh ``context-paging proxy`` app."""
    import httpx2 as httpx
    from context_paging.server.config import load_settings
    from context_paging.server.proxy.commands import make_app

    from bench.proxy_work import (
        Sink,
        anthropic_body,
        anthropic_turn,
        headers_of,
        path_of,
        responses_body,
        responses_turn,
    )
    from bench.select_bench import TURNS
    from tests.fake_provider import Served

    one, body = ((anthropic_turn, anthropic_body) if api == "anthropic"
                 else (responses_turn, responses_body))
    conversation = [m for n in range(TURNS) for m in one(n)]
    whole, grown = body(conversation), body(conversation + one(TURNS))
    work = Path(tempfile.mkdtemp(prefix="calibrate-bench-"))
    home, empty = work / "home", work / "none"
    home.mkdir()
    (home / "config.toml").write_text(
        f'[sources]\npi = "{empty}"\nclaude_code = "{empty}"\ncodex = "{empty}"\n')
    sink = Served(Sink())
    app, history = make_app(load_settings(home=str(home)), argparse.Namespace(
        upstream_anthropic=sink.url, upstream_openai=sink.url))
    proxy = Served(app, lifespan="on")
    route, headers = path_of(api), headers_of(api)
    out: dict[str, float] = {}
    try:
        with httpx.Client(timeout=600) as client:
            for figure, raw in zip(PROXY_FIGURES, (whole, whole, grown), strict=True):
                start = clock()
                response = client.post(proxy.url + route, content=raw, headers=headers)
                response.read()
                out[figure] = clock() - start
                assert response.status_code == 200, response.status_code
    finally:
        proxy.close()
        sink.close()
        history.close()
        shutil.rmtree(work, ignore_errors=True)
    return out


def child(before: str, clock: str, proxy: str | None) -> dict[str, float]:
    """One run of ``before``'s code in a child process (this file, run from there)."""
    env = dict(os.environ, PYTHONPATH=before)
    script = Path(before) / "bench" / "calibrate_bench.py"
    if Path(before).resolve() != ROOT:
        shutil.copy(__file__, script)
    extra = ["--proxy", proxy] if proxy else []
    done = subprocess.run([sys.executable, str(script), "--child", "--clock", clock, *extra],
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--clock", choices=("wall", "cpu"), default="cpu")
    parser.add_argument("--before", help="another checkout, timed side by side")
    parser.add_argument("--proxy", choices=("anthropic", "responses"),
                        help="through the proxy, this API, instead of the library")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    if args.child:
        print(json.dumps(run_proxy(args.proxy, clock) if args.proxy else run_once(clock)))
        return
    import context_paging

    figures = PROXY_FIGURES if args.proxy else FIGURES
    after: dict[str, list[float]] = {f: [] for f in figures}
    before: dict[str, list[float]] = {f: [] for f in figures}
    for _ in range(args.repeat):  # interleaved: after, then before, each run
        for figure, seconds in child(str(ROOT), args.clock, args.proxy).items():
            after[figure].append(seconds)
        if args.before:
            for figure, seconds in child(args.before, args.clock, args.proxy).items():
                before[figure].append(seconds)
    print(f"code: {Path(context_paging.__file__).resolve().parent.parent}"
          + (f"; before: {args.before}" if args.before else ""))
    print(f"best of {args.repeat}, {args.clock} clock, ms")
    print(f"{'figure':<16} {'before':>9} {'after':>9} {'ratio':>7}")
    for figure in figures:
        new = min(after[figure]) * 1000
        if before[figure]:
            old = min(before[figure]) * 1000
            print(f"{figure:<16} {old:>9.0f} {new:>9.0f} {old / new:>6.1f}x")
        else:
            print(f"{figure:<16} {'':>9} {new:>9.0f}")


if __name__ == "__main__":
    main()
