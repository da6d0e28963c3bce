"""The proxy's fixed addresses: where it forwards by default, the paths it answers itself, the
home's default place and how a conversation's files are named in it.

Kept apart from server/proxy/app.py so the commands that only name them (the proxy's arguments,
``doctor``, ``install-proxy``, ``statusline``) start without loading the HTTP stack.
"""

from __future__ import annotations

import re

DEFAULT_ANTHROPIC = "https://api.anthropic.com"
DEFAULT_OPENAI = "https://api.openai.com"
DEFAULT_GEMINI = "https://generativelanguage.googleapis.com"
HEALTH_PATH = "/_context-paging/health"
# The live view and its JSON (server/proxy/view.py, docs/live-view.md): every path under it
# needs the view's token.
VIEW_PREFIX = "/context-paging/"

# Where the home is when neither --home nor the environment says (server/config.py).
DEFAULT_HOME = "~/.local/share/context-paging"
ENV_HOME = "CONTEXT_PAGING_HOME"


def safe_name(session: str) -> str:
    """The agent's id as a file-safe name, one to one: letters, digits, ``.`` and ``-`` stay,
    every other byte (``_`` included) becomes ``_`` and two hex digits, so ``team/a`` and
    ``team-a`` stay apart. A name longer than 80 keeps 60 characters, then ``__`` (which no
    escape makes) and a digest of the whole."""
    name = "".join(c if _SAFE.fullmatch(c) else "".join(f"_{b:02x}" for b in c.encode())
                   for c in session)
    if len(name) > 80:
        import hashlib  # only here: the status line starts without it

        name = name[:60] + "__" + hashlib.blake2b(session.encode(), digest_size=8).hexdigest()
    return name


_SAFE = re.compile(r"[A-Za-z0-9.-]")
