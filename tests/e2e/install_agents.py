"""Install the pinned real agents from npm into a cache the end-to-end suite runs them from.

    python tests/e2e/install_agents.py [--cache DIR]

The cache (default ``~/.cache/context-paging/agents``, or ``$CONTEXT_PAGING_AGENTS``) is an npm
prefix: ``node_modules/.bin/{claude,codex,pi,gemini,opencode}``. A cache that already holds
exactly the pinned versions is left alone and npm is not called; otherwise the missing or wrong
ones are installed at their exact versions. Standard library only, so CI can run it before
anything else.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PINS = {
    "@anthropic-ai/claude-code": "2.1.197",
    "@openai/codex": "0.171.0",
    "@mariozechner/pi-coding-agent": "0.73.1",
    "@google/gemini-cli": "0.61.0",
    "opencode-ai": "1.18.33",
}
CACHE_ENV = "CONTEXT_PAGING_AGENTS"


def default_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "context-paging"
                / "agents")


def installed_version(cache: Path, package: str) -> str | None:
    try:
        manifest = json.loads((cache / "node_modules" / package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    version = manifest.get("version") if isinstance(manifest, dict) else None
    return version if isinstance(version, str) else None


def missing(cache: Path) -> dict[str, str | None]:
    """Each pinned package the cache lacks at its pinned version, with what it holds."""
    found = {package: installed_version(cache, package) for package in PINS}
    return {package: version for package, version in found.items() if version != PINS[package]}


def install(cache: Path, npm: str | None = None) -> int:
    wrong = missing(cache)
    if not wrong:
        print(f"agents: {cache} already holds {_pinned(PINS)}; nothing installed")
        return 0
    npm = npm or shutil.which("npm")
    if npm is None:
        print(f"agents: npm not found; cannot install {_pinned(wrong)}", file=sys.stderr)
        return 1
    cache.mkdir(parents=True, exist_ok=True)
    specs = [f"{package}@{PINS[package]}" for package in wrong]
    print(f"agents: installing {' '.join(specs)} into {cache}", file=sys.stderr)
    done = subprocess.run([npm, "install", "--prefix", str(cache), "--save-exact",
                           "--no-audit", "--no-fund", *specs])
    still = missing(cache)
    if done.returncode != 0 or still:
        print(f"agents: npm exited {done.returncode}; still missing {_pinned(still)}",
              file=sys.stderr)
        return 1
    print(f"agents: {cache} holds {_pinned(PINS)}")
    return 0


def _pinned(packages: dict[str, str | None]) -> str:
    return ", ".join(f"{package}@{PINS[package]}" for package in packages)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cache", type=Path, default=None,
                        help=f"the npm prefix to install into (default ${CACHE_ENV} or "
                        "~/.cache/context-paging/agents)")
    args = parser.parse_args(argv)
    return install(args.cache or default_cache())


if __name__ == "__main__":
    sys.exit(main())
