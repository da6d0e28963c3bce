"""Recovery in band: the recovery tools the proxy offers the model itself, and runs itself.

An agent with no recovery tools (no MCP client, the server not registered, tools that load
late) still has its window paged; the model needs a way back to what left it. So, per
conversation, from its first paged request on (docs/proxy.md, "Recovery in band"):

- **Offer**: ``search_history``, ``read_context_output`` and ``recall`` are appended to the
  request's ``tools``, in the API's shape, with the MCP tools' names, descriptions and input
  schemas (``server/data/recovery-tools.json``, written from the ``tools/list`` snapshot by
  ``python -m context_paging.server.commands.docs --write``) less their ``session`` argument.
  The bytes never change, so the cached prefix holds. ``[proxy] recovery_tools``: ``auto``
  offers them when the agent has none (``has_recovery_tools``), ``always``, ``never``; an agent
  tool of the same name always wins (nothing is added, one log line).
- **Answer** (server/proxy/answer.py): a reply that calls them is not passed on; the proxy runs
  the calls against the conversation's ledger (:func:`run_call`, through ``History``) and asks
  the provider again with the model's message and the results, and the agent gets one reply.
- **Remember**: each hidden exchange is a record (:class:`Hidden`) kept per conversation in
  ``CONTEXT_PAGING_HOME/inband/<session>.jsonl`` and put back in place in every later request
  (:func:`expand`) before the window is made: the ledger stores it with its turn, it leaves the
  window with that turn, the recovery tools find it, and a restarted proxy reads it back.
- **Word the notice once**: the notice of a conversation names the tools offered in band, the
  agent's own recovery tools, or the CLI's commands; which, is decided at its first paged request
  (:meth:`InBand.worded`) and kept, with the offer, in ``CONTEXT_PAGING_HOME/inband/<session>.json``
  (:class:`Decision`): the agent's MCP tools showing up or going away later, or a restarted
  proxy, never re-word a notice the provider has cached (docs/proxy.md, "The notice's wording").

A record: ``at`` (the index of the agent's assistant message the exchange belongs to),
``anchor`` (a digest of the message before it, without ``cache_control`` markers), ``rounds``
(per round the model's whole message as sent back to the provider, the proxy's results, and how
many of that message's blocks or items reached the agent), and ``merged``: the last round's
results were not answered by a follow-up (the reply also called the agent's own tools, or the
round bound was reached), so they travel in the agent's next message.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from context_paging.index.home.overwrite import overwrite
from context_paging.index.home.private import FILE_MODE, private_directory
from context_paging.server.errors import failure
from context_paging.server.proxy import wire

log = logging.getLogger("context_paging")

OFFERED = ("search_history", "read_context_output", "recall")
DEFINITIONS = Path(__file__).resolve().parents[1] / "data" / "recovery-tools.json"
MODES = ("auto", "always", "never")
WORDINGS = ("inband", "tools", "shell")  # the notice names: the offered tools, the agent's, the CLI
MAX_RESULT_CHARS = 24_000  # one tool result at most (load_history's cap)
KEPT = 512  # conversations whose decision and records stay in memory


@functools.cache
def definitions() -> tuple[dict[str, Any], ...]:
    """The offered tools: name, description, input_schema (the MCP tools' own)."""
    return tuple(json.loads(DEFINITIONS.read_text(encoding="utf-8")))


def _each(entry: Any) -> Any:
    return lambda tools: [entry(t["name"], t["description"], t["input_schema"]) for t in tools]


# Per API, the ``tools`` entries that offer the tools (name, description, input schema); an API
# not listed here is never offered them. Gemini takes them as one entry of function
# declarations, with the schema as JSON Schema (``parametersJsonSchema``).
ENTRIES = {
    "anthropic": _each(lambda name, text, schema: {
        "name": name, "description": text, "input_schema": schema}),
    "responses": _each(lambda name, text, schema: {
        "type": "function", "name": name, "description": text, "parameters": schema,
        "strict": False}),
    "chat": _each(lambda name, text, schema: {"type": "function", "function": {
        "name": name, "description": text, "parameters": schema}}),
    "gemini": lambda tools: [{"functionDeclarations": [
        {"name": t["name"], "description": t["description"],
         "parametersJsonSchema": t["input_schema"]} for t in tools]}],
}


def answers(api: wire.Api) -> bool:
    """Whether the proxy can offer and answer the recovery tools in this API's requests."""
    return api.name in ENTRIES


@functools.cache
def offered_bytes(api_name: str) -> bytes:
    """The offered tools as ``tools`` entries of the API, compact JSON joined by commas."""
    return b",".join(wire.dumps(entry).encode() for entry in ENTRIES[api_name](definitions()))


@functools.cache
def offered_values(api_name: str) -> tuple[dict[str, Any], ...]:
    """The same entries as values (the window counts them as resident input)."""
    return tuple(json.loads(b"[" + offered_bytes(api_name) + b"]"))


def tool_names(api: wire.Api, value: Mapping[str, Any]) -> set[str]:
    """The names of the agent's own tools in a request body."""
    names = set()
    tools = value.get("tools") if isinstance(value.get("tools"), list) else []
    for tool in [*tools, *(d for t in tools if isinstance(t, dict)  # Gemini's declarations
                           for d in t.get("functionDeclarations") or ())]:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else tool.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


def anchor(message: Any) -> str:
    """A digest of a message, without the ``cache_control`` markers agents move around."""
    text = json.dumps(wire.without_markers(message), sort_keys=True, ensure_ascii=True)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


# --- the hidden exchanges -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Round:
    assistant: Any  # the model's whole message (Anthropic, Chat), turn (Gemini) or output
    # items (Responses)
    results: list[dict[str, Any]]  # the proxy's results: tool_result blocks, output items,
    # tool messages or functionResponse parts
    shown: int  # how many of its blocks / items / text characters reached the agent


@dataclasses.dataclass(frozen=True)
class Hidden:
    at: int
    anchor: str
    rounds: tuple[Round, ...]
    merged: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "anchor": self.anchor, "merged": self.merged,
                "rounds": [dataclasses.asdict(r) for r in self.rounds]}

    @staticmethod
    def from_dict(value: Mapping[str, Any]) -> Hidden:
        return Hidden(int(value["at"]), str(value["anchor"]),
                      tuple(Round(r["assistant"], list(r["results"]), int(r["shown"]))
                            for r in value["rounds"]), bool(value.get("merged")))


@dataclasses.dataclass(frozen=True)
class Decision:
    """A conversation's recovery: whether the tools are offered in band, whether that no longer
    changes, and the notice's wording (one of :data:`WORDINGS`; None until its first notice)."""

    offered: bool
    fixed: bool = False
    notice: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"offered": self.offered, "notice": self.notice}

    @staticmethod
    def from_dict(value: Mapping[str, Any]) -> Decision:
        offered, notice = value["offered"], value["notice"]
        if not isinstance(offered, bool) or notice not in (None, *WORDINGS):
            raise ValueError(f"not a decision: {value!r}")
        return Decision(offered, True, notice)


class Store:
    """Per conversation, its hidden exchanges: in memory, and one JSON line each on disk."""

    def __init__(self, home: Path | None) -> None:
        self.directory = None if home is None else Path(home) / "inband"
        self._records: OrderedDict[str, list[Hidden]] = OrderedDict()
        self._lock = threading.Lock()

    def records(self, session: str) -> list[Hidden]:
        with self._lock:
            known = self._records.get(session)
        if known and self.directory is not None and not self._path(session).exists():
            known = None  # deleted (``forget``): what memory held is not put back either
        if known is None:
            known = self._read(session)
            with self._lock:
                self._records[session] = known
                while len(self._records) > KEPT:
                    self._records.popitem(last=False)
        return known

    def add(self, session: str, record: Hidden) -> None:
        records = self.records(session)
        with self._lock:
            self._records[session] = [*(r for r in records if r.at != record.at), record]
        if self.directory is None:
            return
        private_directory(self.directory)
        line = (wire.dumps(record.to_dict()) + "\n").encode()
        fd = os.open(self._path(session), os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)

    def _path(self, session: str, suffix: str = ".jsonl") -> Path:
        assert self.directory is not None
        return self.directory / f"{session}{suffix}"  # a ledger session id: a file-safe name

    def decision(self, session: str) -> Decision | None:
        """The conversation's kept decision, or None (none kept, or a file it cannot read)."""
        if self.directory is None:
            return None
        try:
            value = json.loads(self._path(session, ".json").read_text(encoding="utf-8"))
            return Decision.from_dict(value)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("proxy: in-band decision of %s not read: %s", session, exc)
            return None

    def keep(self, session: str, decision: Decision) -> None:
        if self.directory is None:
            return
        private_directory(self.directory)
        overwrite(self._path(session, ".json"), wire.dumps(decision.to_dict()).encode())

    def _read(self, session: str) -> list[Hidden]:
        if self.directory is None:
            return []
        try:
            text = self._path(session).read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.warning("proxy: in-band records of %s not read: %s", session, exc)
            return []
        found: dict[int, Hidden] = {}
        for line in text.splitlines():
            try:
                record = Hidden.from_dict(json.loads(line))
            except (ValueError, KeyError, TypeError):
                continue  # a half-written last line
            found[record.at] = record  # the latest record for a place wins
        return list(found.values())


def expand(api: wire.Api, conversation: list[Any], records: Sequence[Hidden]) -> list[Any]:
    """The agent's conversation with each hidden exchange back in its place (the very messages
    the provider was sent), so the model's context stays what it saw. A record whose place no
    longer matches (the agent rewound or edited its history) is left out."""
    if not records:
        return conversation
    out = list(conversation)
    for record in sorted(records, key=lambda r: r.at, reverse=True):
        n = record.at
        if not 0 < n < len(conversation) or anchor(conversation[n - 1]) != record.anchor:
            continue
        placed = PLACES[api.name](conversation, record)
        if placed is not None:
            out[n:n + placed[0]] = placed[1]
    return out


def _kinds(items: Sequence[Any]) -> list[Any]:
    return [item.get("type", "message") if isinstance(item, dict) else None for item in items]


def _responses_place(conversation: list[Any], record: Hidden) -> tuple[int, list[Any]] | None:
    """Responses: the agent's copies of the output items it was shown, from ``record.at``, are
    replaced by each round's whole output and the proxy's ``function_call_output`` items (the
    agent's own outputs follow, wherever the round's results went)."""
    n = record.at
    shown = sum(r.shown for r in record.rounds)
    theirs = conversation[n:n + shown]
    mine = [item for r in record.rounds for item in r.assistant if not _offered_item(item)]
    if len(theirs) != shown or _kinds(theirs) != _kinds(mine):
        return None
    placed = [item for r in record.rounds for item in (*r.assistant, *r.results)]
    return shown, placed


def _offered_item(item: Any) -> bool:
    return (isinstance(item, dict) and item.get("type") == "function_call"
            and item.get("name") in OFFERED)


def _chat_place(conversation: list[Any], record: Hidden) -> tuple[int, list[Any]] | None:
    """Chat: the agent's assistant message holds every round's text (``shown`` characters each)
    and its own calls; it becomes each round's whole message and the proxy's ``tool``
    messages, then the rest of its text as a message of its own."""
    n = record.at
    message = conversation[n]
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    text = message.get("content") if isinstance(message.get("content"), str) else ""
    shown = sum(r.shown for r in record.rounds)
    if len(text) < shown:
        return None
    placed = [m for r in record.rounds for m in (r.assistant, *r.results)]
    rest = text[shown:]
    if not record.merged and (rest or message.get("tool_calls")):
        placed.append({**message, "content": rest})
    return 1, placed


def _anthropic_place(conversation: list[Any], record: Hidden) -> tuple[int, list[Any]] | None:
    """(how many agent messages from ``record.at`` are replaced, by which messages)."""
    n = record.at
    message = conversation[n]
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return None
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        return None
    shown = sum(r.shown for r in record.rounds)
    if len(blocks) < shown:
        return None
    placed: list[Any] = []
    for hidden in record.rounds:
        placed += [hidden.assistant, {"role": "user", "content": hidden.results}]
    rest = blocks[shown:]
    if not record.merged:
        if rest:
            placed.append({**message, "content": rest})
        return 1, placed
    results = placed.pop()["content"]
    if rest:  # the agent's message has more than the record knows of: not this reply
        return None
    following = conversation[n + 1] if n + 1 < len(conversation) else None
    if isinstance(following, dict) and following.get("role") == "user":
        theirs = following.get("content")
        theirs = [{"type": "text", "text": theirs}] if isinstance(theirs, str) else theirs
        placed.append({**following, "content": [*results, *(theirs or [])]})
        return 2, placed
    placed.append({"role": "user", "content": results})
    return 1, placed


def _gemini_place(conversation: list[Any], record: Hidden) -> tuple[int, list[Any]] | None:
    """Gemini: the agent's model turn holds every round's text (``shown`` characters each;
    Gemini CLI joins adjacent text parts and keeps no thoughts) and then its own parts. It
    becomes each round's whole turn and a user turn of the proxy's ``functionResponse`` parts,
    then the rest of it as a turn of its own; a merged record's last results open the agent's
    next user turn, before its own responses."""
    n = record.at
    turn = conversation[n]
    parts = turn.get("parts") if isinstance(turn, dict) else None
    if not isinstance(parts, list) or turn.get("role") != "model":
        return None
    left, rest = sum(r.shown for r in record.rounds), []
    for part in parts:
        text = part.get("text") if isinstance(part, dict) and not part.get("thought") else None
        if left and isinstance(text, str):
            taken = min(left, len(text))
            left -= taken
            if text[taken:]:
                rest.append({**part, "text": text[taken:]})
        elif isinstance(part, dict) and not (left and part.get("thought")):
            rest.append(part)
    if left:
        return None
    placed: list[Any] = []
    for hidden in record.rounds:
        placed += [hidden.assistant, {"role": "user", "parts": hidden.results}]
    if not record.merged:
        if rest:
            placed.append({**turn, "parts": rest})
        return 1, placed
    results = placed.pop()["parts"]
    if any("functionCall" not in p for p in rest):  # more than the record knows of
        return None
    following = conversation[n + 1] if n + 1 < len(conversation) else None
    if isinstance(following, dict) and following.get("role") == "user":
        theirs = following.get("parts") if isinstance(following.get("parts"), list) else []
        placed.append({**following, "parts": [*results, *theirs]})
        return 2, placed
    placed.append({"role": "user", "parts": results})
    return 1, placed


PLACES = {"anthropic": _anthropic_place, "responses": _responses_place, "chat": _chat_place,
          "gemini": _gemini_place}  # per API: where a hidden exchange goes back


# --- the offer ------------------------------------------------------------------------------------


class InBand:
    """The in-band recovery of one proxy: the setting, the History the calls run against,
    each conversation's decision (made at its first request, then kept) and records.
    ``history`` None with ``mode`` ``never``: a proxy that offers nothing still words each
    conversation's notice once (:meth:`worded`)."""

    def __init__(self, history: Any, home: Path | None, mode: str = "auto",
                 rounds: int = 3) -> None:
        if mode not in MODES:
            raise ValueError(f"recovery_tools must be one of {', '.join(MODES)}")
        self.history = history
        self.mode = mode
        self.rounds = rounds
        self.store = Store(home)
        self._decided: OrderedDict[str, Decision] = OrderedDict()
        self._lock = threading.Lock()

    def offers(self, session: str, api: wire.Api, value: Mapping[str, Any],
               has_tools: bool) -> bool:
        """Whether this request carries the offered tools. Decided at the conversation's first
        request (a conversation that already has hidden exchanges, after a restart, keeps
        them), and fixed from its first paged request on (:meth:`worded`), kept in the home so
        a restarted proxy goes on offering what the notice names. Before that, agent recovery
        tools that show up late (Codex lists its MCP servers after its first tool output; an
        MCP client may connect late) withdraw the offer, once, while nothing has left the
        window yet. An agent tool of an offered tool's name withdraws it at any time (a request
        may not define a name twice)."""
        if not answers(api):
            return False
        decided = self._decision(session)
        clash = tool_names(api, value) & set(OFFERED)
        if decided is not None and decided.offered and clash:
            decided = None  # the agent's own tool of the same name wins, even once fixed
        if decided is None:
            offer = (self.mode != "never" and not clash
                     and (self.mode == "always" or not has_tools
                          or bool(self.store.records(session))))
            if clash and self.mode != "never":
                log.info("proxy: the agent has its own %s; no recovery tools offered in %s",
                         ", ".join(sorted(clash)), session)
            decided = Decision(offer, bool(clash))
        elif (decided.offered and not decided.fixed and has_tools and self.mode == "auto"):
            log.info("proxy: the agent's own recovery tools showed up in %s before any paging; "
                     "the proxy's offer is withdrawn", session)
            decided = Decision(False, True)
        self._set(session, decided)
        return decided.offered and self.mode != "never"

    def worded(self, session: str, offered: bool, has_tools: bool) -> str:
        """The wording of the conversation's notice (:data:`WORDINGS`): the one it was first
        given, else, at its first paged request, the tools this request has (the offered
        ones, the agent's own, or none: the CLI), kept from then on with the offer."""
        decided = self._decision(session) or Decision(offered)
        if decided.notice == "inband" and not offered:  # the setting went to ``never``
            decided = dataclasses.replace(decided, notice=None)
        if decided.notice is None:
            wording = "inband" if offered else "tools" if has_tools else "shell"
            decided = Decision(offered, True, wording)
            self._set(session, decided)
            self._keep(session, decided)
        return str(decided.notice)

    def fix(self, session: str) -> None:
        """The model used the offered tools: the offer no longer changes."""
        decided = self._decision(session)
        if decided is not None and not decided.fixed:
            decided = dataclasses.replace(decided, fixed=True)
            self._set(session, decided)
            self._keep(session, decided)

    def _decision(self, session: str) -> Decision | None:
        with self._lock:
            decided = self._decided.get(session)
        if decided is None:
            decided = self.store.decision(session)  # kept by an earlier run of the proxy
        return decided

    def _set(self, session: str, decided: Decision) -> None:
        with self._lock:
            self._decided.pop(session, None)
            self._decided[session] = decided
            while len(self._decided) > KEPT:
                self._decided.popitem(last=False)

    def _keep(self, session: str, decided: Decision) -> None:
        try:
            self.store.keep(session, decided)
        except OSError as exc:  # kept in memory; a restart decides again
            log.warning("proxy: in-band decision of %s not kept: %s", session, exc)

    def expand(self, session: str, api: wire.Api, conversation: list[Any]) -> list[Any]:
        return expand(api, conversation, self.store.records(session))

    def remember(self, session: str, record: Hidden) -> None:
        self.store.add(session, record)
        self.fix(session)  # the model used them: the offer stays


# --- running a call -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Ran:
    text: str
    error: bool = False
    found: bool = False  # the call returned something


def run_call(history: Any, session: str, name: str, arguments: Any) -> Ran:
    """One offered tool's call, run for the conversation's ledger session; a bad argument or a
    failure of the operation is the call's error text, never an exception."""
    schema = next((t["input_schema"] for t in definitions() if t["name"] == name), None)
    if schema is None:
        return Ran(f"UNKNOWN_TOOL: {name!r} is not offered", True)
    problem = _invalid(schema, arguments)
    if problem:
        return Ran(f"INVALID_ARGUMENT: {problem}", True)
    given = {k: v for k, v in arguments.items() if v is not None}
    ref = f"ledger:{session}"
    try:
        if name == "search_history":
            reply = history.search(
                given["query"], ref, given.get("scope", "session"), given.get("files") or (),
                given.get("tools") or (), given.get("failed"), given.get("limit", 5),
                given.get("load", False), None, offset=given.get("offset", 0))
            return _capped(_search_text(reply), bool(reply.references))
        if name == "read_context_output":
            page = history.read_output(ref, **given)
            text = page["text"]
            if page["next_offset"] is not None:
                text += (f"\n[characters {page['offset']}-{page['next_offset']} of "
                         f"{page['total_characters']}; next page: offset={page['next_offset']}]")
            return _capped(text, bool(page["total_characters"]))
        recalled = history.recall(ref, **given)
        return _capped(recalled.text, bool(recalled.text))
    except Exception as exc:  # the model reads the error; the agent's request goes on
        failed = failure(exc)
        if failed is None:
            log.warning("proxy: in-band %s failed: %s: %s", name, type(exc).__name__, exc)
            return Ran(f"INTERNAL_ERROR: {type(exc).__name__}", True)
        return Ran(f"{failed.code}: {failed.message}", True)


def _capped(text: str, found: bool) -> Ran:
    if len(text) > MAX_RESULT_CHARS:
        text = (text[:MAX_RESULT_CHARS] + f"\n[cut at {MAX_RESULT_CHARS:,} of {len(text):,} "
                "characters; ask for less: a smaller limit, an offset or a pattern]")
    return Ran(text, False, found)


def _search_text(reply: Any) -> str:
    """search_history's reply as the model reads it (the MCP tool's text copy): each match's
    line with its spans in «…»."""
    from context_paging.index.search.query import marked

    references = []
    for reference in reply.references:
        shown = [{k: v for k, v in m.items() if k != "spans" and v is not None}
                 | {"text": marked(m["text"], m.get("spans") or ())}
                 for m in reference.get("matches", ())]
        references.append({**reference, "matches": shown})
    value = {"references": references, "items": reply.items,
             "unloaded_history_ids": reply.unloaded_history_ids, "note": reply.note,
             "searched": dataclasses.asdict(reply.searched), "next_offset": reply.next_offset}
    return wire.dumps({k: v for k, v in value.items() if v is not None})


_TYPES = {"string": str, "integer": int, "boolean": bool, "array": list, "object": dict}


def _invalid(schema: Mapping[str, Any], arguments: Any) -> str | None:
    """What is wrong with the arguments for this input schema (the subset the tools use), or
    None."""
    if not isinstance(arguments, dict):
        return "the arguments are not an object"
    properties = schema.get("properties", {})
    for key in schema.get("required", ()):
        if arguments.get(key) is None:
            return f"field {key!r} is required"
    for key, value in arguments.items():
        if key not in properties:
            return f"unknown field {key!r}"
        problem = _value_problem(properties[key], value)
        if problem:
            return f"field {key!r} {problem}"
    return None


def _value_problem(schema: Mapping[str, Any], value: Any) -> str | None:
    if "anyOf" in schema:
        problems = [_value_problem(s, value) for s in schema["anyOf"]]
        return None if any(p is None for p in problems) else next(p for p in problems if p)
    kind = schema.get("type")
    if kind == "null":
        return None if value is None else "must be null"
    wanted = _TYPES.get(kind)
    if wanted is not None and (not isinstance(value, wanted)
                               or (wanted is int and isinstance(value, bool))):
        return f"must be of type {kind}"
    if "enum" in schema and value not in schema["enum"]:
        return "must be one of " + ", ".join(repr(v) for v in schema["enum"])
    if isinstance(value, str) and len(value) > schema.get("maxLength", len(value)):
        return f"is longer than {schema['maxLength']} characters"
    if isinstance(value, int) and not isinstance(value, bool):
        if value < schema.get("minimum", value) or value > schema.get("maximum", value):
            return "is out of range"
    if isinstance(value, list):
        if len(value) > schema.get("maxItems", len(value)):
            return f"has more than {schema['maxItems']} entries"
        for item in value:
            problem = _value_problem(schema.get("items", {}), item)
            if problem:
                return "entries " + problem
    return None
