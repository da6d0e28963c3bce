"""The ``context-paging`` console script: ``statusline`` answers from here, before the command
line's parser, settings and modules load (Claude Code runs it often; server/statusline.py);
every other command goes to server/cli.py."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    command = words[2:] if words[:1] == ["--home"] else words
    if command[:1] == ["statusline"] and not {"-h", "--help"} & set(words):
        from context_paging.server import statusline

        return statusline.main(words)
    from context_paging.server.cli import main as cli_main

    return cli_main(words)
