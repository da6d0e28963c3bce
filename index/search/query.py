"""What a search query asks for, and where in an item it matched (the lines a hit shows).

The syntax (docs/search.md): words are ranked by BM25 and any of them may match; text in double
quotes is a phrase, whose tokens must stand next to each other in that order; ``AND`` between
words makes every word required; ``OR`` is the default and is dropped; ``-word`` leaves out items
holding that word. A phrase's tokens are required terms for the index (it keeps no positions);
the phrase itself is checked on the few candidate items' text here.

Pure functions over strings and :class:`~index.history.HistoryItem` values: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from context_paging.index.history import HistoryItem, call_text, decoded_output, search_text
from context_paging.index.model import HiddenBlock, TextBlock, ToolCall
from context_paging.index.search.analysis import _ASCII_TOKEN, _EDGES, _TOKEN, tokens, unescaped

_QUOTED = re.compile(r'"([^"]*)"?')
LINE_CHARS = 200  # a shown line is clipped to this many characters around its match
MAX_MATCHES = 2  # lines shown per hit
MAX_CANDIDATES = 200  # lines holding a query term looked at per hit


@dataclass(frozen=True, slots=True)
class ParsedQuery:
    """A query split into what ranks, what must hold and what must not."""

    text: str  # the query as given
    ranked: str  # every word and phrase token, for BM25 (index.search.analysis.query_tokens)
    phrases: tuple[tuple[str, ...], ...] = ()  # token runs that must stand together
    required: tuple[str, ...] = ()  # tokens every hit holds (a phrase's, or all with AND)
    excluded: tuple[str, ...] = ()  # tokens no hit holds
    # The tokens of an unquoted query of several words: an item holding them together is put
    # first, though others may match too.
    verbatim: tuple[str, ...] = field(init=False)
    terms: frozenset[str] = field(init=False)  # every ranked token

    def __post_init__(self) -> None:
        words = tuple(tokens(self.ranked))
        object.__setattr__(self, "verbatim", words if not self.phrases and len(words) > 1
                           else ())
        object.__setattr__(self, "terms", frozenset(words))


def parse(query: str) -> ParsedQuery:
    """``query`` as a :class:`ParsedQuery` (an unclosed quote runs to the end)."""
    phrases: list[tuple[str, ...]] = []
    ranked: list[str] = []
    for match in _QUOTED.finditer(query):
        words = tuple(tokens(match.group(1)))
        if words:
            phrases.append(words)
            ranked.extend(words)
    rest = _QUOTED.sub(" ", query).split()
    every = "AND" in rest
    excluded: list[str] = []
    free: list[str] = []
    for word in rest:
        if word in ("AND", "OR"):
            continue
        if word.startswith("-") and word[1:2].isalnum() and tokens(word[1:]):  # not --flag
            excluded.extend(tokens(word[1:]))
            continue
        free.extend(tokens(word))
    ranked.extend(free)
    required = [w for p in phrases for w in p] + (free if every else [])
    if not phrases and not every and not excluded and "OR" not in rest:
        return ParsedQuery(query, query)  # a plain query ranks exactly as before
    return ParsedQuery(query, " ".join(ranked), tuple(phrases),
                       tuple(dict.fromkeys(required)), tuple(dict.fromkeys(excluded)))


def holds_run(text: str, words: Sequence[str]) -> bool:
    """Whether ``text`` holds the tokens ``words`` next to each other, in order."""
    if not words:
        return True
    lowered = unescaped(text).lower()
    if lowered.isascii():  # a cheap necessary condition before tokenizing (most items fail it)
        between = "[^a-z0-9_]+".join(re.escape(w) for w in words)
        if not re.search(between, lowered):
            return False
    found, size = tokens(text), len(words)
    return any(found[i:i + size] == list(words) for i, t in enumerate(found) if t == words[0])


def holds(item: HistoryItem, parsed: ParsedQuery) -> bool:
    """Every phrase of the query stands in the item's search text."""
    text = search_text(item)
    return all(holds_run(text, phrase) for phrase in parsed.phrases)


# --- the lines a hit shows ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Part:
    """One searchable piece of an item, addressed as read_context_output / recall address it."""

    source: str  # "user" | "assistant" | "tool_result"
    text: str
    content_index: int | None = None
    tool_call_id: str | None = None
    tool_name: str | None = None
    # A decoded piece of a JSON output: the output's line it is written on, which every one of
    # its lines reports (recall's offset into the output as recorded).
    written_on: int | None = None


def parts(item: HistoryItem) -> Iterator[Part]:
    """The item's public pieces in order: its text blocks and tool calls (as search reads them:
    ``index.history.call_text``), then each result (whose lines are numbered as recall numbers
    them: its text blocks joined by newlines; a JSON output's decoded texts each report the line
    they are written on)."""
    source = "user" if item.kind == "user" else "assistant"
    for index, block in enumerate(item.message.content):
        if isinstance(block, HiddenBlock):
            continue
        if isinstance(block, ToolCall):
            yield Part(source, call_text(block), index, tool_call_id=block.id,
                       tool_name=block.name)
        elif isinstance(block, TextBlock):
            yield Part(source, block.text, index)
    for result in item.tool_results:
        text = "\n".join(b.text for b in result.content if isinstance(b, TextBlock))
        name = result.tool_name or (c.name if (c := item.call(result.tool_call_id or "")) else None)
        pieces = decoded_output(text)
        if pieces is None:
            yield Part("tool_result", text, tool_call_id=result.tool_call_id, tool_name=name)
            continue
        for line, piece in pieces:
            yield Part("tool_result", piece, tool_call_id=result.tool_call_id, tool_name=name,
                       written_on=line)


def token_spans(line: str) -> list[tuple[str, int, int]]:
    """(token, start, end) of each token of one line, as :func:`index.search.analysis.tokens` finds
    them (offsets into ``line``; a lower-casing that changes the length shifts them a little)."""
    lowered = unescaped(line).lower()
    if lowered.isascii():
        return [(m.group(0), m.start(), m.end()) for m in _ASCII_TOKEN.finditer(lowered)]
    spans = []
    for m in _TOKEN.finditer(lowered):
        raw = m.group(0)
        token = raw.strip(_EDGES)
        if token:
            start = m.start() + len(raw) - len(raw.lstrip(_EDGES))
            spans.append((token, start, start + len(token)))
    return spans


def _line_match(line: str, parsed: ParsedQuery) -> tuple[int, list[tuple[int, int]]]:
    """(how well a line matches: phrase holders far ahead, then distinct terms; its spans)."""
    found = token_spans(line)
    words = [t for t, _, _ in found]
    for phrase in parsed.phrases or ((parsed.verbatim,) if parsed.verbatim else ()):
        size = len(phrase)
        for i in range(len(words) - size + 1):
            if tuple(words[i:i + size]) == phrase:
                return 1000 + size, [(found[i][1], found[i + size - 1][2])]
    spans, seen = [], set()
    for token, start, _end in found:
        for term in parsed.terms:
            at = _inside(term, token)
            if at >= 0:
                spans.append((start + at, start + at + len(term)))
                seen.add(term)
    return len(seen), sorted(spans)


_SEPARATOR = "./:-"


def _inside(term: str, token: str) -> int:
    """Where ``term`` stands in ``token`` as the whole token or as a run of its parts (between
    separators or the edges: ``needle`` in ``src/needle.ts``, ``components/modal.tsx`` in
    ``src/components/modal.tsx``), else -1."""
    if term == token:
        return 0
    at = token.find(term)
    while at >= 0:
        end = at + len(term)
        if (at == 0 or token[at - 1] in _SEPARATOR) and \
                (end == len(token) or token[end] in _SEPARATOR):
            return at
        at = token.find(term, at + 1)
    return -1


def matches(item: HistoryItem, parsed: ParsedQuery, most: int = MAX_MATCHES) -> list[dict]:
    """The item's best matching lines, best first: each with where it is (source, tool call,
    1-based line number in that output or block), the line (clipped) and the match offsets
    in it. The search stops once ``most`` lines match as well as a line can (the phrase, or
    every term), or after ``MAX_CANDIDATES`` lines that hold a term: a long log that repeats
    its lines costs no more than a short one."""
    wanted = parsed.terms
    if not wanted:
        return []
    runs = parsed.phrases or ((parsed.verbatim,) if parsed.verbatim else ())
    best = 1000 + max(len(r) for r in runs) if runs else len(wanted)
    scored, perfect = [], 0
    for part in parts(item):
        for number, line in _candidate_lines(part.text, wanted):
            score, spans = _line_match(line, parsed)
            if not spans:
                continue
            scored.append((-score, len(scored), part, number, line, spans))
            perfect += score >= best
            if perfect >= most or len(scored) >= MAX_CANDIDATES:
                break
        if perfect >= most or len(scored) >= MAX_CANDIDATES:
            break
    scored.sort(key=lambda row: row[:2])
    if scored and -scored[0][0] >= 1000:  # a line holds the phrase: words apart add nothing
        scored = [row for row in scored if -row[0] >= 1000]
    return [_shown(part, number, line, spans) for _, _, part, number, line, spans in
            scored[:most]]


def _candidate_lines(text: str, wanted: frozenset[str]) -> Iterator[tuple[int, str]]:
    """(1-based number, line) of the lines of ``text`` that hold a query term as a substring,
    in order, found with ``str.find`` (a long output is not split into lines)."""
    lowered = text.lower()
    if len(lowered) != len(text):  # a lower-casing that changes lengths: go line by line
        for number, line in enumerate(text.split("\n"), 1):
            if any(term in line.lower() for term in wanted):
                yield number, line
        return
    starts: set[int] = set()
    for term in wanted:
        at = lowered.find(term)
        while at >= 0 and len(starts) < 4 * MAX_CANDIDATES:
            starts.add(lowered.rfind("\n", 0, at) + 1)
            end = lowered.find("\n", at)
            at = lowered.find(term, end) if end >= 0 else -1
    number, counted = 1, 0
    for start in sorted(starts):
        number += text.count("\n", counted, start)
        counted = start
        end = text.find("\n", start)
        yield number, text[start:end if end >= 0 else len(text)]


def _shown(part: Part, number: int, line: str, spans: list[tuple[int, int]]) -> dict:
    start = max(0, min(spans[0][0] - LINE_CHARS // 4, len(line) - LINE_CHARS))
    end = min(len(line), start + LINE_CHARS)
    clipped = line[start:end]
    kept = [(max(a, start) - start, min(b, end) - start) for a, b in spans if a < end and b > start]
    return {
        "source": part.source,
        "tool_name": part.tool_name,
        "tool_call_id": part.tool_call_id,
        "content_index": part.content_index,
        "line": number if part.written_on is None else part.written_on,
        "text": ("…" if start else "") + clipped + ("…" if end < len(line) else ""),
        "spans": [[a + bool(start), b + bool(start)] for a, b in kept],
    }


def marked(text: str, spans: Sequence[Sequence[int]]) -> str:
    """``text`` with each span in «…» (the form the model and a terminal read)."""
    out, at = [], 0
    for start, end in sorted(spans):
        if start < at:
            continue
        out += [text[at:start], "«", text[start:end], "»"]
        at = end
    out.append(text[at:])
    return "".join(out)
