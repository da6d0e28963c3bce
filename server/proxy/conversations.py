"""Which ledger conversation a request belongs to: one conversation, one ledger session.

A request's key (server/proxy/wire.py) names the agent's session and how the conversation opens,
but two conversations can share both: two Claude Code subagents started in parallel with the
same prompt send the same session id and the same first message, and Pi sends no id at all. So
the key only names a request's candidates; its messages decide. An agent sends its whole history
every request, so each request extends the previous one of its conversation. The proxy keeps,
per conversation, a digest of the chain of messages of its latest request; a request whose
messages start with that chain continues it, any other starts a conversation of its own. Two
conversations that opened alike part at their first different message, and neither moves the
other's cut; an exact repeat of the latest request (a retry) stays in its conversation. A chain
is let go once a request extends it with the model's output (an assistant message): a twin that
extends it later is a conversation of its own. A request that only adds a question of its own
(no model output: a side call that resends the conversation, or a retry) leaves it held, so the
conversation going on from before that question is still the same one.

A message's digest is taken from its bytes as received, without ``cache_control`` markers (which
agents move to the newest message every request); resident items (paging/resident.py: standing
context the agent re-sends, such as Codex's environment and permissions) take no part in it, so
an agent that rewrites them does not start a new conversation.

The names: a conversation with an agent session id takes the key itself when no conversation
the proxy remembers holds it (the first one, and the same one after a restart, which continues
its ledger); another conversation of that id takes the key and the first six hex digits of the
digest of the chain it started with (the same messages under the same id give the same name,
in this process or the next). A conversation without an id takes the key and six random hex
digits, so that no two share a ledger session whenever they ran (the same prompt opens many Pi
sessions). The chains live in the proxy's memory: after a restart a continuing conversation
without an id starts a new ledger session, which stores its history again.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
from collections import OrderedDict

from context_paging.paging.resident import RESPONSES_MODEL, is_resident
from context_paging.server.proxy.resent import same_objects
from context_paging.server.proxy.wire import Body

_MARKER = re.compile(rb',\s*"cache_control"\s*:\s*\{[^{}]*\}|"cache_control"\s*:\s*\{[^{}]*\}\s*,?')
KEPT = 512  # conversations remembered (the oldest is forgotten first)
KNOWN = 32  # of them, the latest requests whose messages and chain are kept for reuse


def chain(body: Body, field: str, known: tuple[list, list[bytes]] = ([], []),
          fmt: str = "") -> list[bytes]:
    """The digest of every prefix of the conversation array ``field``: ``chain[i]`` covers the
    items up to and including ``i`` (resident items in ``fmt`` leave it as it was). ``known``:
    an earlier body's messages and chain; while this body's messages are the very same objects
    (server/proxy/resent.py reuses the values of the bytes two bodies share), their digests are
    taken as they are, so only new messages are hashed."""
    messages = body.value[field]
    objects, digests = known
    same = same_objects(messages, objects)
    out = list(digests[:same])
    previous = out[-1] if out else b""
    for index in range(same, len(messages)):
        if not is_resident(messages[index], fmt):
            start, end = body.items[index]
            text = body.raw[start:end]  # the message's bytes (spans are byte spans)
            if b'"cache_control"' in text:
                text = _MARKER.sub(b"", text)
            previous = hashlib.blake2b(previous + text, digest_size=16).digest()
        out.append(previous)
    return out


def answered(items: list, fmt: str) -> bool:
    """Whether these items hold the model's output (an assistant message, a Responses model
    item): what a conversation's next request adds to its previous one."""
    return any(isinstance(item, dict) and (
        item.get("role") == "assistant"
        or (fmt == "responses" and item.get("type") in RESPONSES_MODEL)) for item in items)


class Chains:
    """The latest chain of each conversation the proxy pages."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        # (key, latest chain) -> ledger session: conversations of other keys never match
        self._latest: OrderedDict[tuple[str, bytes], str] = OrderedDict()
        # per ledger session: its latest request's messages and chain, to hash only what is new
        self._known: OrderedDict[str, tuple[list, list[bytes]]] = OrderedDict()
        self._lock = threading.Lock()

    def key(self, body: Body, base: str, field: str, fmt: str = "",
            identified: bool = False) -> str:
        """The ledger session of this request: the conversation its messages continue, else a
        new one. ``base``: the request's key; ``identified``: it names the agent's session, so
        the first conversation of it (that the proxy remembers) takes ``base`` itself."""
        messages = body.value[field]
        with self._lock:
            known = next((k for k in reversed(self._known.values())
                          if messages and k[0] and k[0][0] is messages[0]), ([], []))
        digests = chain(body, field, known, fmt)
        with self._lock:
            name = None
            for at in range(len(digests) - 1, -1, -1):
                name = self._latest.get((base, digests[at])) if digests[at] else None
                if name is not None:
                    if answered(messages[at + 1:], fmt):  # the conversation moved past it
                        del self._latest[base, digests[at]]
                    break
            if name is None and identified:
                held = set(self._latest.values())
                # the first of its key keeps the key; a branch is named by where it stands
                last = digests[-1] if digests else b""
                name = next((n for n in (base, f"{base}-{last[:3].hex()}" if last else None)
                             if n is not None and n not in held), None)
            if name is None:  # never a name used before, in this process or an earlier one
                name = f"{base}-{secrets.token_hex(3)}"
            if digests and digests[-1]:
                self._latest[base, digests[-1]] = name
                self._latest.move_to_end((base, digests[-1]))  # the oldest is let go first
                while len(self._latest) > self.kept:
                    self._latest.popitem(last=False)
            self._known.pop(name, None)
            self._known[name] = (list(messages), digests)
            while len(self._known) > KNOWN:
                self._known.popitem(last=False)
            return name
