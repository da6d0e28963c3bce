"""Judges: who says which chunks are still needed (docs/distillation.md, "The judges").

A judge answers one :class:`~paging.distill.plan.Segment` at a time: the chunks of one part of
a large output, or a batch of small outputs or of old exchanges (chunk ``i`` = item ``i``). It
returns a score in [0, 1] per chunk index — P(still needed) — or None for "cannot judge", which
keeps everything. The thresholds of the config apply to these scores.

* :class:`LocalJudge` — offline and deterministic. Evidence (identifiers, paths, quoted lines)
  from the final answer and the user's next request keeps a chunk at 1.0, even in an
  out-of-date output; otherwise a superseded output scores 0. Evidence from the agent's notes
  keeps a current chunk at 1.0 (at checkpoints the notes are the progress, and count as the
  answer does); evidence from the request, the later tool calls and the earlier conversation
  at 0.9; failure lines keep a chunk at checkpoints. Then word overlap with the work, counting
  distinctive words only (see :class:`LocalJudge`): two shared words keep a chunk, one keeps
  only a window of a read or a log, none scores low. With no words to compare at all it
  returns None. Any doubt → keep.
* The ``sampling`` judge lives in the server (it needs MCP). It sends
  :func:`prompt_for_segment` for each segment, reads the reply with :func:`parse_chunk_ids`
  (None on any doubt → keep) and turns the ids into scores with :func:`scores_from_ids`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Protocol

from context_paging.paging.distill.chunk import KNOWN_EXTENSION, Chunk
from context_paging.paging.distill.model import JudgeContext, Question
from context_paging.paging.distill.names import path_pattern as _path_pattern
from context_paging.paging.distill.names import path_regex as _path_regex  # noqa: F401
from context_paging.paging.distill.render import clip


class Judge(Protocol):
    name: str

    def judge(
        self, question: Question, chunks: Sequence[Chunk], context: JudgeContext
    ) -> Mapping[int, float] | None: ...


_BACKTICK = re.compile(r"`([^`\n]+)`")
_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.DOTALL)
_PATH = re.compile(r"[\w@~+-][\w@~.+-]*(?:/[\w@~.+-]+)+|[\w+-][\w.+-]*\.[A-Za-z][A-Za-z0-9]{0,9}")
# A match of _PATH lies inside one run of these characters; tried at every position of a long
# run it cannot match in (no slash, no dot before a letter), it scans to the run's end each
# time: 40 s for a pasted 48,000-character token. Runs this long are no path anyone cites, so
# they are left out and the text around them is read as before (:func:`_paths`).
PATH_RUN_LIMIT = 256
_LONG_RUN = re.compile(rf"(?<![\w@~.+/-])[\w@~.+/-]{{{PATH_RUN_LIMIT},}}")
_TOKEN = re.compile(r"[A-Za-z_$][A-Za-z0-9_$]*")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]{3,}")
_FAILURE = re.compile(
    r"\b(?:FAIL(?:ED|URE)?|ERROR|Error|error:|Traceback|\w*Exception|AssertionError|"
    r"assert(?:ion)?|panic(?:ked)?)\b"
)
# A match of _FAILURE is bounded by ``\b`` on both sides, so it is a whole run of
# ``[A-Za-z0-9_]`` — one of these words (``error:`` being ``error`` and a colon), or one that ends
# in ``Exception`` — and so one of the text's ``_words``: a text whose words hold none is
# skipped without the regex (its leading ``\w*`` makes a miss cost a scan per word character),
# and the words are the ones the chunk's terms were read from already.
_FAILURE_WORDS = frozenset({"FAIL", "FAILED", "FAILURE", "ERROR", "Error", "error",
                            "Traceback", "AssertionError", "assert", "assertion", "panic",
                            "panicked"})


# Cached per text like the chunk's terms, so spare time can read it ahead (prepare_chunk): the
# words it reads are otherwise still in _words' small cache only right after the terms.
@functools.lru_cache(maxsize=16_384)
def _failure_in(text: str) -> bool:
    words = _words(text)
    return (not _FAILURE_WORDS.isdisjoint(words) or any(
        word.endswith("Exception") for word in words)) and _FAILURE.search(text) is not None


_STOPWORDS = frozenset(
    """about above after again also always another anything around because been before being
    below between both cannot could does doing done down during each either else even every
    file files find found from further have having here into itself just keep know last like
    line lines look made make many more most much must need needs next none only other ours
    over please same shall should show shows some such sure than that their them then there
    these they this those though through under until upon very want wants well were what when
    where which while will with within without would your yours okay thanks true false null
    return function class const self none print value values used using uses""".split()
)


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    """The word's lower-case stem, or "" for a stopword (cached: words repeat across chunks)."""
    word = word.lower()
    if word in _STOPWORDS:
        return ""
    for suffix, repl in (("ies", "y"), ("ing", ""), ("ed", ""), ("es", ""), ("s", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 4:
            return word[: len(word) - len(suffix)] + repl
    return word


@functools.lru_cache(maxsize=16_384)  # chunks and work paragraphs (see _paragraphs)
def _terms(text: str) -> frozenset[str]:
    # Cached per text: the same request, answer and later tool calls are read for every segment
    # of every output of a run, so a run end over hundreds of outputs reads each text once.
    return frozenset(map(_stem, _words(text))) - {""}


# _WORD's characters kept, every other byte a space (a character that is not ASCII is one "?").
_WORD_BYTES = bytes(b if chr(b).isascii() and (chr(b).isalnum() or b == 95) else 32
                    for b in range(256))


# Cached for _failure_in, which asks a chunk's words again after the segment's terms were read
# (a segment holds at most 60 chunks); any text's words (a grep chunk's without its prefixes)
# are held, so the cache is kept small.
@functools.lru_cache(maxsize=256)
def _words(text: str) -> frozenset[str]:
    """``set(_WORD.findall(text))``, a third faster: the runs of ``[A-Za-z0-9_]`` split out in
    C, then each distinct run from its first letter. A match of ``_WORD`` starts at a run's
    first letter (it cannot start at a digit or ``_``, and one that could start at a later
    letter of the run would have started at the first) and takes the rest of the run, when
    that is four characters or more; nothing else in the run can match."""
    runs = set(text.encode("ascii", "replace").translate(_WORD_BYTES).split())
    return frozenset([word.decode() for word in map(bytes.lstrip, runs, repeat(b"0123456789_"))
                      if len(word) >= 4])


_CAMEL = re.compile(r"[a-z][A-Z]")
_PASCAL = re.compile(r"[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+")
_LETTER = re.compile(r"[A-Za-z]")
_DIGIT = re.compile(r"\d")


def _is_identifier(token: str) -> bool:
    if len(token) < 3:
        return False
    core = token.strip("_$")
    return (
        "_" in core
        or _CAMEL.search(token) is not None
        or _PASCAL.fullmatch(token) is not None
        or (_LETTER.search(token) is not None and _DIGIT.search(token) is not None)
    )


@dataclass(frozen=True, slots=True)
class Evidence:
    """Anchors found in a text: exact lines it quotes, paths and identifiers it names."""

    quoted: frozenset[str]
    paths: frozenset[str]
    identifiers: frozenset[str]

    @classmethod
    def of(cls, texts: Iterable[str]) -> Evidence:
        return cls.union([_text_evidence(text) for text in texts if text])

    @classmethod
    def union(cls, parts: Sequence[Evidence]) -> Evidence:
        return cls(
            frozenset().union(*(p.quoted for p in parts)),
            frozenset().union(*(p.paths for p in parts)),
            frozenset().union(*(p.identifiers for p in parts)),
        )

    @classmethod
    def of_text(cls, text: str) -> Evidence:
        quoted: set[str] = set()
        paths: set[str] = set()
        identifiers: set[str] = set()
        spans = _BACKTICK.findall(text)
        lines = [ln for block in _FENCE.findall(text) for ln in block.split("\n")]
        lines += [ln[1:] for ln in text.split("\n") if ln.startswith(">")]
        for span in [*spans, *lines]:
            span = span.strip()
            if len(span) >= 8 and not _TOKEN.fullmatch(span):
                quoted.add(span)
        for span in spans:
            if _TOKEN.fullmatch(span.strip()) and len(span.strip()) >= 3:
                identifiers.add(span.strip())
        for match in _paths(text):
            path = match.rstrip(".")
            if len(path) >= 4 and ("/" in path or KNOWN_EXTENSION.search(path)):
                paths.add(path)
        identifiers.update(t for t in _TOKEN.findall(text) if _is_identifier(t))
        return cls(frozenset(quoted), frozenset(paths), frozenset(identifiers))

    def __bool__(self) -> bool:
        return bool(self.quoted or self.paths or self.identifiers)

    def found_in(self, chunk: Chunk, flat: str) -> bool:
        text = chunk.text
        if any(q in text or spaced in flat for q, spaced in _spaced(self.quoted)):
            return True
        if self.paths:
            # A whole-name match is a substring first: most chunks name none of the paths, and
            # the substring tests rule them out without running the pattern.
            pattern, names = _path_pattern(self.paths)
            if _names_in(names, text) and pattern.search(text):
                return True
            if _names_a_path(chunk.files, self.paths):
                return True
        # An identifier counts as a whole token: the same as a bounded search for each one,
        # but one pass over the chunk however many identifiers the work names.
        return bool(self.identifiers) and not self.identifiers.isdisjoint(_tokens(text))


_RUN = re.compile(r"[\w$]+")


def _names_in(names: tuple[str, ...], text: str) -> bool:
    """``any(name in text for name in names)``: for more than a couple of names, one search of
    their alternation (a pass over the text that tests each position against every name's
    first character at once, about 1 µs a KB on the bench's outputs, where a ``str.find`` per
    name took 1-2 µs a KB each: their dots fill the find's skip table)."""
    if len(names) < 3:
        return any(name in text for name in names)
    return _alternation(names).search(text) is not None


@functools.lru_cache(maxsize=256)  # one work's names, asked of every chunk of its outputs
def _alternation(names: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("|".join(map(re.escape, names)))


def _names_a_path(files: Iterable[str], paths: frozenset[str]) -> bool:
    """Whether a file is one of ``paths`` or ends with "/" and one of them: the same as testing
    every (file, path) pair, in one set lookup per "/" of each file (grep output names a file
    on every chunk, and the work may name dozens of paths)."""
    for name in files:
        if name in paths:
            return True
        slash = name.find("/")
        while slash >= 0:
            if name[slash + 1:] in paths:
                return True
            slash = name.find("/", slash + 1)
    return False


@functools.lru_cache(maxsize=256)
def _spaced(quoted: frozenset[str]) -> tuple[tuple[str, str], ...]:
    """Each quoted line with its whitespace runs made single spaces (what ``found_in`` also
    looks for in the chunk's flattened text): worked out once per work, not once per chunk."""
    return tuple((q, " ".join(q.split())) for q in quoted)


@functools.lru_cache(maxsize=4096)
def _tokens(text: str) -> frozenset[str]:
    return frozenset(_RUN.findall(text))


# Word-overlap scores, against the config's thresholds (chunk keep 0.6, small keep 0.45,
# exchange omit below 0.2): a word shared with the work is weak evidence, two are enough.
_NONE = {"output": 0.0, "small": 0.1, "exchange": 0.05}  # no distinctive word shared
# One shared word: below the keep thresholds of chunks and small outputs, but not below the
# exchange omit threshold — an exchange is omitted only when it shares no distinctive word
# (bench/fixture_eval.py: omitting on one word lost 13 of 185 exchanges the next run used).
_ONE = {"output": 0.5, "small": 0.4, "exchange": 0.2}
_ONE_IN_A_WINDOW = 0.65  # one, in a window of a read or a log: kept (see LocalJudge)
COMMON_SHARE = 0.25  # in grep output, a word in more than this share of the chunks is common
# The exchange text's own template words and tool names: every exchange "read"s something.
_EXCHANGE_NOISE = frozenset(
    _stem(w) for w in """user prompt final answer tool calls more bash shell read write edit
    multiedit grep view glob search""".split()
)
_COMMAND = re.compile(r'"(?:command|cmd)"\s*:')
_GREP_PREFIX = re.compile(r"^[^\s:][^:\n]*?(?::\d+:|-\d+-)", re.MULTILINE)


class LocalJudge:
    """Offline, deterministic relevance (see the module docstring).

    Word overlap counts only *distinctive* words: no stopwords; in grep output not the words
    of the call itself (its pattern is on every line), not the ``path:line:`` prefixes (a file
    counts through path evidence) and not a word found in more than a quarter of the chunks;
    in a command's output not the command's own words (``pytest tests/`` prints "tests");
    in an exchange not its template words or tool names. Two shared words keep a chunk, one
    does not — except in a window of a read or a log, where one still keeps it: measured on
    the session fixtures (bench/fixture_eval.py), the windows a later turn used share no more
    words with the run than the others, so stricter overlap there only loses lines.
    """

    name = "local"

    def judge(
        self, question: Question, chunks: Sequence[Chunk], context: JudgeContext
    ) -> dict[int, float] | None:
        work = _Work.of(question, context)
        if not work.words and not work.final and not work.task:
            return None
        shared = [_item_terms(c, k, context) & work.words for k, c in enumerate(chunks)]
        grep = any(c.files for c in chunks)
        own = _terms(context.arguments) | _terms(context.tool)
        if grep:
            shared = _discriminating(shared, own)
        elif context.kind == "output" and _COMMAND.search(context.arguments):
            shared = [words - own for words in shared]  # a log: its command's words don't count
        one = _ONE_IN_A_WINDOW if context.kind == "output" and not grep else _ONE[context.kind]
        return {chunk.index: self._score(chunk, k, shared[k], work, context, one)
                for k, chunk in enumerate(chunks)}

    @staticmethod
    def _score(chunk: Chunk, position: int, matched: set[str], work: _Work,
               context: JudgeContext, one: float) -> float:
        # Only quoted lines are looked for in the flattened text: without any, it is not made.
        quoted = work.decisive.quoted or work.final.quoted or work.task.quoted
        flat = " ".join(chunk.text.split()) if quoted else ""
        item = position if context.kind != "output" else 0
        superseded = item < len(context.superseded) and bool(context.superseded[item])
        if work.decisive.found_in(chunk, flat):
            return 1.0
        if superseded:
            return 0.0
        # at a checkpoint the decisive evidence is the final one: asked above already
        if work.final is not work.decisive and work.final.found_in(chunk, flat):
            return 1.0
        if work.task.found_in(chunk, flat):
            return 0.9
        failed = item < len(context.failed) and context.failed[item]
        if (context.phase == "mid-run" or failed) and _failure_in(chunk.text):
            return 0.8
        if len(matched) >= 2:
            return min(1.0, 0.55 + 0.1 * len(matched))
        return one if matched else _NONE[context.kind]


@dataclass(frozen=True, slots=True)
class _Work:
    """What one judge call weighs chunks against."""

    decisive: Evidence  # keeps even an out-of-date chunk
    final: Evidence  # the answer, notes and next request (checkpoints: the notes)
    task: Evidence  # the request, later calls, earlier conversation
    words: frozenset[str]  # for word overlap

    @classmethod
    def of(cls, question: Question, context: JudgeContext) -> _Work:
        history = [user for user, _ in question.history]
        final_texts = [question.answer, question.notes, question.latest_note, question.follow_up]
        if context.kind == "exchange":
            final_texts.append(question.request)
            task_texts: list[str] = []
        else:
            task_texts = [question.request, *context.later_calls, *history]
        final = Evidence.of(final_texts)
        if context.phase == "mid-run":
            words = final_texts + task_texts
            return cls(final, final, Evidence.of(task_texts), _union_terms(words))
        # Run end. An out-of-date output stays only for what the answer or the next request
        # names; the notes and later calls tell what the run already did with it. The words
        # that predict what is still needed are the answer's, the next request's and the
        # task's (an exchange is judged against the current request, not its own history).
        words = [question.answer, question.follow_up, question.request]
        if context.kind != "exchange":
            words += history
        return cls(Evidence.of([question.answer, question.follow_up]), final,
                   Evidence.of(task_texts), _union_terms(words))


def _union_terms(texts: Iterable[str]) -> frozenset[str]:
    return frozenset().union(*(_text_terms(t) for t in texts if t))


# A work text whole, from its paragraphs: every segment of a pass weighs the same request, so it
# is put together once a pass, not once a segment.
@functools.lru_cache(maxsize=1024)
def _text_evidence(text: str) -> Evidence:
    return Evidence.union([_evidence(piece) for piece in _paragraphs(text)])


@functools.lru_cache(maxsize=1024)
def _text_terms(text: str) -> frozenset[str]:
    return frozenset().union(*(_terms(piece) for piece in _paragraphs(text)))


def _paragraphs(text: str) -> list[str]:
    """A work text in paragraphs, each read (and cached) on its own.

    The run's request grows by a steering message per turn, so read whole it would be read
    again every call. No word, token, path, backtick span or quote line crosses a line break,
    so a text's words and evidence are the union of its paragraphs'; only a fenced block can
    span paragraphs, so a text with a fence is read whole."""
    if "```" in text or "\n\n" not in text:
        return [text]
    return text.split("\n\n")


def _item_terms(chunk: Chunk, position: int, context: JudgeContext) -> frozenset[str]:
    """The words a chunk can share with the work: a grep chunk's without its ``path:line:``
    prefixes; a small output's plus those of its call (``read src/csv/parse.js``); an
    exchange's without its template words and tool names."""
    if chunk.files:
        return _grep_terms(chunk.text)
    if context.kind == "small" and position < len(context.labels):
        return _terms(chunk.text) | _terms(context.labels[position])
    if context.kind == "exchange":
        return _terms(chunk.text) - _EXCHANGE_NOISE
    return _terms(chunk.text)


def prepare_chunk(chunk: Chunk) -> None:
    """Read into their caches what :class:`LocalJudge` reads of a large output's chunk (its
    terms, whether it holds a failure line, the tokens identifiers are looked up in): spare
    time, so a later judgment finds them; every cache is keyed by the chunk's text, so no
    score depends on it."""
    if chunk.files:
        _grep_terms(chunk.text)
    else:
        _terms(chunk.text)
    _failure_in(chunk.text)
    _tokens(chunk.text)


@functools.lru_cache(maxsize=4096)
def _grep_terms(text: str) -> frozenset[str]:
    return _terms(_GREP_PREFIX.sub("", text))


def _discriminating(shared: list[frozenset[str]], own: frozenset[str]) -> list[frozenset[str]]:
    """In one grep output, the words that can tell its chunks apart: not the call's own words
    and, with three chunks or more, not a word in more than ``COMMON_SHARE`` of them."""
    shared = [words - own for words in shared]
    if len(shared) < 3:
        return shared
    counts: dict[str, int] = {}
    for words in shared:
        for word in words:
            counts[word] = counts.get(word, 0) + 1
    common = {w for w, n in counts.items() if n > COMMON_SHARE * len(shared)}
    return [words - common for words in shared]


def prompt_for_segment(question: Question, chunks: Sequence[Chunk], context: JudgeContext) -> str:
    """One self-contained prompt asking a model which chunk (or item) numbers to keep."""
    sections = [_SITUATION[context.kind]]
    if question.history or question.summary or question.first_request:
        earlier = [f"Summary: {question.summary}"] if question.summary else []
        if question.first_request:
            earlier.append(f"First request: {question.first_request}")
        for user, assistant in question.history:
            earlier.append(f"User: {user}" + (f"\nAgent: {assistant}" if assistant else ""))
        sections.append("## Earlier in the session\n" + "\n\n".join(earlier))
    sections.append("## The user's request\n" + clip(question.request, 4_000))
    if context.phase == "run-end":
        sections.append("## The agent's final answer\n" + clip(question.answer, 6_000))
        if question.notes.strip():
            sections.append("## The agent's notes during the run\n" + clip(question.notes, 2_000))
        if question.follow_up.strip():
            sections.append("## The user's next request\n" + clip(question.follow_up, 4_000))
    else:
        if question.latest_note.strip():
            sections.append("## The agent's latest note\n" + clip(question.latest_note, 2_000))
        if question.notes.strip():
            sections.append("## Earlier notes\n" + _tail(question.notes, 2_000))
    sections.append(_pieces(chunks, context))
    sections.append(_TASK[(context.kind, context.phase)] + _REPLY)
    return "\n\n".join(sections)


def _tail(text: str, limit: int) -> str:
    return text if len(text) <= limit else "[…]\n" + text[len(text) - limit + 4:]


def _pieces(chunks: Sequence[Chunk], context: JudgeContext) -> str:
    if context.kind != "output":
        name = "item" if context.kind == "small" else "exchange"
        out = []
        for k, chunk in enumerate(chunks):
            notes = [context.labels[k]] if k < len(context.labels) else []
            if k < len(context.failed) and context.failed[k]:
                notes.append("the tool reported an error")
            if k < len(context.superseded) and context.superseded[k]:
                notes.append(f"out of date: {context.superseded[k]}")
            body = clip(chunk.text, 4_000 if context.kind == "small" else 1_600)
            out.append(f"[{name} {k + 1}] ({'; '.join(notes)})\n{body}")
        return f"## {name.capitalize()}s\n" + "\n\n".join(out)
    facts = [f"Tool call: {context.labels[0] if context.labels else context.tool}"]
    if context.arguments:
        facts.append(f"Arguments: {context.arguments}")
    if context.failed and context.failed[0]:
        facts.append("Status: the tool reported an error (for example a non-zero exit code).")
    if context.superseded and context.superseded[0]:
        facts.append(f"Out of date: {context.superseded[0]}")
    size = f"Size: {context.total_lines} lines"
    if context.parts > 1:
        size += f"; this is part {context.part} of {context.parts}"
    facts.append(size)
    if context.phase == "mid-run":
        later = "; ".join(context.later_calls) or "none yet"
        facts.append(f"Calls the agent made after this one: {later}")
    body = "\n\n".join(f"[chunk {c.index + 1}]\n{c.text}" for c in chunks)
    return "## The tool output\n" + "\n".join(facts) + "\n\n" + body


_SITUATION = {
    "output": "You help a coding agent keep its context small. Below is the output of one of its "
    "tool calls, cut into numbered chunks. From now on the agent sees only the chunks you "
    "keep; the rest becomes a one-line note and can be fetched again.",
    "small": "You help a coding agent keep its context small. Below are outputs of some of its "
    "tool calls, numbered as items. An item you do not keep becomes a one-line note and can "
    "be fetched again.",
    "exchange": "You help a coding agent keep its context small. Below are earlier, finished "
    "exchanges of one long session: a user prompt and what the agent did for it. An "
    "exchange you do not keep becomes a one-line note and can be fetched again.",
}
_TASK = {
    ("output", "run-end"): "## Task\nList the chunks that the final answer relies on, or that a "
    "likely follow-up question would need.",
    ("output", "mid-run"): "## Task\nThe agent has not finished yet. List the chunks it will still "
    "need to finish the request. Lines that are out of date, or that the agent has already "
    "acted on and moved past, are not needed.",
    ("small", "run-end"): "## Task\nList the items that the final answer relies on, or that a "
    "likely follow-up question would need. An out-of-date item is not needed.",
    ("small", "mid-run"): "## Task\nThe agent has not finished yet. List the items it will still "
    "need. Out-of-date output, or output it has acted on and moved past, is not needed.",
    ("exchange", "run-end"): "## Task\nList the exchanges still relevant to the current work: "
    "the agent may need their details (the same files, task, decisions or facts).",
    ("exchange", "mid-run"): "## Task\nList the exchanges still relevant to the current work: "
    "the agent may need their details (the same files, task, decisions or facts).",
}
_REPLY = (' When unsure, keep it. Reply with JSON only, for example {"keep": [2, 5]}; '
          '{"keep": []} means none is needed.')

_ID = re.compile(r"(?:chunk|item|exchange)?[_ ]?(\d+)", re.IGNORECASE)


def parse_chunk_ids(text: object, allowed: Collection[int] | None = None) -> frozenset[int] | None:
    """The 0-based indexes a reply keeps (it names them 1-based), or None when the reply cannot
    be read or names an id outside ``allowed`` — None means keep everything."""
    if not isinstance(text, str):
        return None
    body = text.strip()
    fenced = re.fullmatch(r"```\w*\s*(.*?)\s*```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1)
    value = _json(body)
    if isinstance(value, dict):
        value = value.get("keep")
    if not isinstance(value, list):
        return None
    ids: set[int] = set()
    for element in value:
        if isinstance(element, int) and not isinstance(element, bool):
            number = element
        elif isinstance(element, str) and (match := _ID.fullmatch(element.strip())):
            number = int(match.group(1))
        else:
            return None
        if number < 1:
            return None
        ids.add(number - 1)
    if allowed is not None and not ids <= set(allowed):
        return None
    return frozenset(ids)


def _json(body: str) -> object:
    candidates = [body]
    for opener, closer in (("{", "}"), ("[", "]")):
        start, end = body.find(opener), body.rfind(closer)
        if 0 <= start < end:
            candidates.append(body[start : end + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except ValueError:
            continue
    return None


def scores_from_ids(ids: frozenset[int] | None, chunks: Sequence[Chunk]) -> dict[int, float] | None:
    """A list answer as scores: 1.0 for a kept chunk, 0.0 for the others (None stays None)."""
    if ids is None:
        return None
    return {c.index: 1.0 if c.index in ids else 0.0 for c in chunks}


def _paths(text: str) -> list[str]:
    """``_PATH.findall(text)`` outside the runs of ``PATH_RUN_LIMIT`` or more path characters
    (the same list where the text has none)."""
    found: list[str] = []
    start = 0
    for run in _LONG_RUN.finditer(text):
        found += _PATH.findall(text, start, run.start())
        start = run.end()
    found += _PATH.findall(text, start)
    return found


@functools.lru_cache(maxsize=16_384)
def _evidence(text: str) -> Evidence:
    """Evidence of one text, cached: see ``_terms``."""
    return Evidence.of_text(text)
