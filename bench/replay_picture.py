"""Regenerate docs/images/replay.svg: what the window sends, request by request.

    python bench/replay_picture.py            # a recorded session if present, else the sample
    python bench/replay_picture.py --sample   # the bundled sample session (a fresh clone)

The picture is the token chart of ``context-paging replay --html`` on its own, with its key:
the recorded Pi session ``pi-v1-real-two-compactions-bash-exec`` (484 requests) at a
24,000-token budget where the recorded sessions are found (bench/recorded.py), else the bundled
sample session at the demo's 12,000. The chars/4 estimator keeps it the same on every machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from context_paging.server.commands.demo import sample_path
from context_paging.server.progress import Progress
from context_paging.server.replay.html import marks, token_series
from context_paging.server.replay.run import ReplayOptions, replay
from context_paging.server.replay.svg import line_chart

from bench.recorded import sessions_folder

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "images" / "replay.svg"
RECORDED = "pi/pi-v1-real-two-compactions-bash-exec.jsonl"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", action="store_true", help="use the bundled sample session")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write (default {OUT})")
    args = parser.parse_args()
    recorded = sessions_folder() / RECORDED
    if not args.sample and recorded.is_file():
        path, budget = recorded, 24_000
    else:
        path, budget = sample_path(), 12_000
    with Progress() as progress:
        result = replay(str(path), ReplayOptions(budget=budget, estimator="chars4"), progress)
    label = (f"Tokens sent per request, {path.stem} ({len(result.rows)} requests, "
             f"budget {budget:,})")
    svg = line_chart(token_series(result), label, "tokens sent", budget=float(budget),
                     marks=[m for m in marks(result) if m.kind == "cut"], standalone=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(svg + "\n", encoding="utf-8")
    print(f"wrote {args.out} from {path.name} at a {budget:,}-token budget", file=sys.stderr)


if __name__ == "__main__":
    main()
