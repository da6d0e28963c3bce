"""What ``--version`` costs beside a bare interpreter, timed in the same run.

Each round runs, in turn, ``python -c pass``, ``python -m context_paging --version`` and the
installed ``context-paging --version`` script (interleaved, so a burst of load on the shared
machine falls on all three alike); the figures are medians over ``--rounds``, printed side by
side with their ratio to ``python -c pass``. Then one ``-X importtime`` run lists the modules
``--version`` loads that a bare interpreter does not (the ones worth cutting).

Compiled bytecode is kept as a user's install keeps it, but in a temporary cache
(``PYTHONPYCACHEPREFIX``, filled by one uncounted round), so ``PYTHONDONTWRITEBYTECODE`` in the
environment does not make every run compile the project's modules again, and the checkout is
left as it was. ``PYTHONPATH=<another checkout>`` measures that checkout's code with the same
interpreter.

    python bench/version_bench.py [--rounds 21]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _timed(argv: list[str], cwd: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def _imported(argv: list[str], cwd: str, env: dict[str, str]) -> set[str]:
    """The modules ``-X importtime`` reports for one run of ``argv`` (a Python command)."""
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=cwd, env=env,
                          capture_output=True, text=True, check=True)
    return {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    args = parser.parse_args()
    script = shutil.which("context-paging") or str(Path(sys.executable).parent / "context-paging")
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -m context_paging --version": [sys.executable, "-m", "context_paging",
                                               "--version"],
        "context-paging --version": [script, "--version"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    with tempfile.TemporaryDirectory() as cwd:  # no package in the working directory
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPYCACHEPREFIX"] = os.path.join(cwd, "pycache")
        for argv in commands.values():  # the bytecode is written, not counted
            _timed(argv, cwd, env)
        for _ in range(args.rounds):
            for name, argv in commands.items():
                times[name].append(_timed(argv, cwd, env))
        extra = sorted(_imported(commands["python -m context_paging --version"], cwd, env)
                       - _imported(commands["python -c pass"], cwd, env))
    floor = statistics.median(times["python -c pass"])
    print(f"{args.rounds} interleaved rounds, medians; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.2f} at the end")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"{name:<36} {median * 1000:7.1f} ms   x{median / floor:5.2f} python -c pass")
    print(f"modules --version loads beyond python -c pass ({len(extra)}): {' '.join(extra)}")


if __name__ == "__main__":
    main()
