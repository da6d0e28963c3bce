"""Which ledger conversation a request without an agent session id belongs to.

Pi sends no session id, and two Pi sessions started with the same prompt send the same first
request, so the opening cannot tell them apart. Their messages can: an agent sends its whole
history every request, so each request extends the previous one of its conversation. The proxy
keeps, per conversation, a digest of the chain of messages of its latest request; a request
whose messages start with that chain continues it, any other starts a conversation of its own.
A message's digest is taken from its bytes as received, without ``cache_control`` markers (which
agents move to the newest message every request). An exact repeat of the latest request (a
retry) stays in its conversation; two sessions that opened alike part at their first
different message. The chains live in the proxy's memory: after a restart a continuing
conversation starts a new ledger session, which stores its history again.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
from collections import OrderedDict

from context_paging.server.proxy.resent import same_objects
from context_paging.server.proxy.wire import Body

_MARKER = re.compile(rb',\s*"cache_control"\s*:\s*\{[^{}]*\}|"cache_control"\s*:\s*\{[^{}]*\}\s*,?')
KEPT = 512  # conversations remembered (the oldest is forgotten first)
KNOWN = 32  # of them, the latest requests whose messages and chain are kept for reuse


def chain(body: Body, field: str, known: tuple[list, list[bytes]] = ([], [])) -> list[bytes]:
    """The digest of every prefix of the conversation array ``field``: ``chain[i]`` covers the
    items up to and including ``i``. ``known``: an earlier body's messages and chain; while this
    body's messages are the very same objects (server/proxy/resent.py reuses the values of the bytes
    two bodies share), their digests are taken as they are, so only new messages are hashed."""
    messages = body.value[field]
    objects, digests = known
    same = same_objects(messages, objects)
    out = list(digests[:same])
    previous = out[-1] if out else b""
    for start, end in body.items[same:]:
        text = body.raw[start:end]  # the message's bytes (spans are byte spans)
        if b'"cache_control"' in text:
            text = _MARKER.sub(b"", text)
        previous = hashlib.blake2b(previous + text, digest_size=16).digest()
        out.append(previous)
    return out


class Chains:
    """The latest chain of each conversation that has no agent session id."""

    def __init__(self, kept: int = KEPT) -> None:
        self.kept = kept
        self._latest: OrderedDict[bytes, str] = OrderedDict()  # latest chain -> ledger session
        # per ledger session: its latest request's messages and chain, to hash only what is new
        self._known: OrderedDict[str, tuple[list, list[bytes]]] = OrderedDict()
        self._lock = threading.Lock()

    def key(self, body: Body, opening: str, field: str) -> str:
        """The ledger session of this request: the conversation its messages continue, else a
        new one: its opening's key and six random hex digits, so that no two conversations
        share a ledger session, whenever they ran."""
        messages = body.value[field]
        with self._lock:
            known = next((k for k in reversed(self._known.values())
                          if messages and k[0] and k[0][0] is messages[0]), ([], []))
        digests = chain(body, field, known)
        with self._lock:
            name = None
            for digest in reversed(digests):
                name = self._latest.pop(digest, None)
                if name is not None:
                    break
            if name is None:  # never a name used before, in this process or an earlier one
                name = f"{opening}-{secrets.token_hex(3)}"
            if digests:
                self._latest[digests[-1]] = name
                while len(self._latest) > self.kept:
                    self._latest.popitem(last=False)
            self._known.pop(name, None)
            self._known[name] = (list(messages), digests)
            while len(self._known) > KNOWN:
                self._known.popitem(last=False)
            return name
