"""The local judge on labels mined from the real session fixtures.

The issue's acceptance: "quality is measured, not assumed". This builds a labelled evaluation
set from every session in ``shared/fixtures/sessions`` (Pi, Claude Code, Codex, read with the
project's own readers) and runs the real distillation pipeline on it.

**What is judged.** Every run that ended with a final answer (its last assistant message called
no tool and was not interrupted), at its run end: the conversation up to and including the next
request goes through ``plan_pass`` → ``judge_plan(LocalJudge())`` → ``decide_plan`` with the
default :class:`~paging.distill.DistillConfig` and no earlier decisions, exactly as
``select_context`` would see it. The session's last run gets an empty next request. Its tool
outputs of at least 400 characters are scored: large (≥ 4,000, chunked) and small (400–4,000,
whole). Outputs of tools the config excludes (edit, write) are never candidates and are left
out.

**How a line is labelled "used"** (mechanical; it looks only at what the agent did later, never
at the judge). Every line is cut into *pieces*: identifier-like tokens of six or more
characters (a path, a dotted or snake_case or camelCase name, letters mixed with digits); runs
of two or three adjacent tokens, at least 12 characters long, that hold such a token or two
words of four or more letters, one of eight or more; and a number of two or more digits next
to a word (``149 passed``, ``line 42``). A piece counts only when it is on at most three lines
of that output (a name on every line says nothing about one line). A line is *used* when one
of its pieces appears, case-sensitively and token for token, in the run's final answer or in
any later assistant text or tool-call arguments (string values: commands, paths, ``oldText``
of edits, written files) of the same session, before a later tool output provides the same
piece again (that output then gets the credit), and the piece was not said before the output:
not in a user message or in assistant text or call arguments before it (the call's own
pattern or path included), nor in a user message of its run. Uses inside the run before its
final answer do not count: that work is done when the run ends, which is when the output is
judged (an ``oldText`` copied from a read into an edit makes the read out of date, not
needed). An output is *needed* when at least one line is used. Nothing is hand-labelled.

**Circularity, said plainly.** The local judge keeps a chunk whose text contains an
identifier, path or quoted line of the final answer, the notes, the next request or the later
calls, and it weighs words shared with them. The labels read the same answer with related
(not identical) token rules, so a line the answer quotes is kept by construction and 100 % on
such lines proves little. Most labelled uses are not visible to the judge, though: they come
from later runs (the judge sees only the next request), from edits and written files, and from
commands. The labels miss uses that paraphrase a line and credit pieces the agent may have got
elsewhere: read "needed" as "a later turn reproduced part of it". Superseded outputs lose
their needed lines by design (docs/distillation.md, "Mid-run checkpoints and break-even": a
newer version exists), so 100 % is not
reachable for reads of files edited later.

**Exchanges.** Each run end's pass also judges the old exchanges before the run (a request
and everything done for it, not among the last two). An exchange counts as *needed* when the
run that the new request starts — the request itself, its assistant texts and call arguments —
reproduces a piece the exchange brought into the session: identifier-like pieces only (a
path, a name; no phrases), first seen inside the exchange, and rare (said in at most
``MAX_MESSAGES_PER_PIECE`` messages of the whole session, so a workspace root or the project's
name does not count). Each (exchange, run end) pair is one row: the judge's call is
"unrelated" when it would omit the exchange (before the break-even gate), and the window's
outcome is what happens after the gate. Uses further in the future are counted separately:
an omission there is what ``recall`` is for.

**Kinds**: *grep* (the chunker's ``is_grep_like`` output, or a grep/rg call), *read* (a read or
view tool, or a shell ``cat``/``sed -n``/``head``/``tail``/``nl`` of a file), *test/build log*
(a shell command that runs tests, builds or linters, or an output with PASS/FAIL lines or a
``N passed``/``N failed`` summary), *other shell*, *other*.

Reported per kind and size: outputs, needed lines kept / needed lines (target 100 %), the share
of characters removed (original minus replacement), and for small outputs needed outputs kept
and unneeded outputs removed. Deterministic (sorted files, no randomness).

    python -m bench.fixture_eval [--fixtures DIR] [--losses]
"""

from __future__ import annotations

import argparse
import bisect
import functools
import re
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from context_paging.index.sessions import load
from context_paging.paging.distill import (
    Chunk,
    Decision,
    DistillConfig,
    LocalJudge,
    Plan,
    decide_plan,
    is_grep_like,
    judge_plan,
)
from context_paging.paging.distill import plan_pass as plan_run_end
from context_paging.paging.distill.conversation import Entry, role, run_starts, text_of, tool_calls
from context_paging.server.replay.run import pi_shaped  # one Pi shape for history messages

from bench.distill_eval import ratio
from bench.recorded import ENV, require, sessions_folder

FIXTURES = sessions_folder()
MAX_LINES_PER_PIECE = 3
MAX_MESSAGES_PER_PIECE = 6
KINDS = ("grep", "read", "test/build log", "other shell", "other")


# --- the fixtures as the distill core's entries (paging/distill/conversation.py) -------------


def session_entries(path: Path) -> list[Entry]:
    return [(m.id, pi_shaped(m)) for m in load(str(path)).conversation.messages]


# --- labels --------------------------------------------------------------------------------

_TOKEN = re.compile(r"[A-Za-z0-9_$]+(?:[./\-][A-Za-z0-9_$]+)*")
_INNER_CAPITAL = re.compile(r"[a-z][A-Z]")


def _identifier_like(token: str) -> bool:
    if len(token) < 6 or token.isdigit():
        return False
    has_digit = any(c.isdigit() for c in token)
    has_letter = any(c.isalpha() for c in token)
    return (any(c in token for c in "_/.$") or (has_digit and has_letter)
            or _INNER_CAPITAL.search(token) is not None)


def _anchored(gram: Sequence[str]) -> bool:
    """An identifier-like token, or a long word with another real word (not ``and the``)."""
    if any(_identifier_like(t) for t in gram):
        return True
    words = [t for t in gram if t.isalpha() and len(t) >= 4]
    return len(words) >= 2 and any(len(t) >= 8 for t in words)


def _number_with_word(a: str, b: str) -> bool:
    return ((a.isdigit() and len(a) >= 2 and b.isalpha() and len(b) >= 4)
            or (b.isdigit() and len(b) >= 2 and a.isalpha() and len(a) >= 4))


@functools.lru_cache(maxsize=200_000)
def line_pieces(line: str) -> frozenset[str]:
    """The distinctive pieces of one line (module docstring)."""
    tokens = _TOKEN.findall(line)
    out = {t for t in tokens if _identifier_like(t)}
    for n in (2, 3):
        for k in range(len(tokens) - n + 1):
            gram = tokens[k:k + n]
            joined = " ".join(gram)
            if len(joined) >= 12 and _anchored(gram):
                out.add(joined)
            elif n == 2 and _number_with_word(*gram):
                out.add(joined)
    return frozenset(out)


def text_pieces(text: str) -> set[str]:
    return set().union(*(line_pieces(line) for line in text.split("\n")))


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def use_text(message: Mapping[str, Any]) -> str:
    """What an assistant message contributes: its text and its calls' string arguments."""
    parts = [text_of(message)]
    for call in tool_calls(message):
        parts.extend(_strings(call.get("arguments")))
    return "\n".join(parts)


def label_session(entries: Sequence[Entry]) -> dict[str, frozenset[int]]:
    """Tool call id → the 0-based indexes of the lines a later turn used, for every tool
    output of at least 400 characters."""
    messages = [m for _, m in entries]
    said: dict[str, int] = {}  # piece -> first user/assistant message that contains it
    used: dict[str, list[int]] = {}  # piece -> assistant messages that contain it
    provided: dict[str, list[int]] = {}  # piece -> tool outputs that contain it
    for i, message in enumerate(messages):
        kind = role(message)
        if kind == "toolResult":
            for piece in text_pieces(text_of(message)):
                provided.setdefault(piece, []).append(i)
        elif kind in ("assistant", "user"):
            pieces = text_pieces(use_text(message) if kind == "assistant" else text_of(message))
            for piece in pieces:
                said.setdefault(piece, i)
                if kind == "assistant":
                    used.setdefault(piece, []).append(i)
    starts = run_starts(messages)
    labels: dict[str, frozenset[int]] = {}
    for i, message in enumerate(messages):
        text = text_of(message)
        if role(message) != "toolResult" or len(text) < 400:
            continue
        run = _run_of(starts, i, len(messages))
        own = set().union(*(text_pieces(text_of(messages[k])) for k in run
                            if role(messages[k]) == "user"))
        answer = max((k for k in run if role(messages[k]) == "assistant"), default=i)
        per_line = [line_pieces(line) for line in text.split("\n")]
        lines_with = Counter(p for pieces in per_line for p in pieces)
        labels[str(message.get("toolCallId"))] = frozenset(
            k for k, pieces in enumerate(per_line)
            if any(lines_with[p] <= MAX_LINES_PER_PIECE and said.get(p, len(messages)) > i
                   and p not in own and _credited(i, answer, used.get(p, ()), provided[p])
                   for p in pieces)
        )
    return labels


class ExchangeLabels:
    """Which old exchanges the work after a run end used (module docstring, "Exchanges")."""

    def __init__(self, entries: Sequence[Entry]) -> None:
        self.messages = [m for _, m in entries]
        self.first: dict[str, int] = {}  # piece -> first message of any kind holding it
        self.said: dict[str, list[int]] = {}  # piece -> user/assistant messages holding it
        self.pieces: list[set[str]] = []
        for i, message in enumerate(self.messages):
            kind = role(message)
            text = use_text(message) if kind == "assistant" else text_of(message)
            pieces = text_pieces(text)
            self.pieces.append(pieces)
            for piece in pieces:
                self.first.setdefault(piece, i)
                if kind in ("assistant", "user"):
                    self.said.setdefault(piece, []).append(i)

    def used(self, start: int, end: int, after: int, until: int | None = None) -> bool:
        """Did a request or assistant message in ``[after, until)`` reproduce a piece that the
        exchange ``[start, end)`` brought into the session? Only identifier-like pieces count
        (a path, a name, not a phrase), and only rare ones: said in at most
        ``MAX_MESSAGES_PER_PIECE`` messages of the whole session (a workspace root or a
        project name recurs everywhere and says nothing about one exchange)."""
        for i in range(start, end):
            for piece in self.pieces[i]:
                if self.first[piece] < start:
                    continue  # known before the exchange: no evidence it was needed
                if " " in piece or len(self.said.get(piece, ())) > MAX_MESSAGES_PER_PIECE:
                    continue
                later = self.said.get(piece, ())
                k = bisect.bisect_left(later, after)
                if k < len(later) and (until is None or later[k] < until):
                    return True
        return False


def _run_of(starts: Sequence[int], index: int, end: int) -> range:
    k = bisect.bisect_right(starts, index) - 1
    if k < 0:
        return range(0)
    return range(starts[k], starts[k + 1] if k + 1 < len(starts) else end)


def _credited(output: int, answer: int, uses: Sequence[int], providers: Sequence[int]) -> bool:
    """A use from the run's final answer on, before the next output that provides the piece."""
    after = bisect.bisect_right(providers, output)
    until = providers[after] if after < len(providers) else float("inf")
    first = bisect.bisect_left(uses, max(answer, output + 1))
    return first < len(uses) and uses[first] < until


# --- kinds ---------------------------------------------------------------------------------

_READ_TOOLS = frozenset({"read", "view", "read_file", "readfile", "open_file"})
_GREP_TOOLS = frozenset({"grep", "rg", "search", "ripgrep", "grep_search"})
_SHELL_TOOLS = frozenset({"bash", "shell", "exec_command", "run_terminal_cmd", "terminal"})
_READ_COMMAND = re.compile(r"^(?:cat|sed\s+-n|head|tail|nl|bat|less)\b")
_GREP_COMMAND = re.compile(r"^(?:grep|egrep|rg|ag|ack|git\s+grep)\b")
_TEST_COMMAND = re.compile(
    r"\b(?:pytest|py\.test|unittest|tox|nox|npm\s+(?:run\s+)?(?:test|build|lint|check)|"
    r"(?:pnpm|yarn|bun)\s+(?:run\s+)?(?:test|build|lint|check|tsc)|npx\s+(?:vitest|jest|tsc)|"
    r"vitest|jest|make|cargo\s+(?:test|build|check|clippy)|go\s+(?:test|build|vet)|"
    r"mvn|gradle|tsc|node\s+--test|ruff|mypy|eslint|just\s+test)\b"
)
_TEST_LINES = re.compile(r"^\s*(?:FAIL|PASS|FAILED|PASSED)\b|\b\d+ (?:passed|failed)\b",
                         re.MULTILINE)


def command_of(arguments: Any) -> str | None:
    if not isinstance(arguments, Mapping):
        return None
    value = arguments.get("command", arguments.get("cmd"))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = value[-1] if len(value) >= 3 and value[1] in ("-lc", "-c") else " ".join(value)
    return " ".join(value.split()) if isinstance(value, str) and value.strip() else None


def _first_program(command: str) -> str:
    """The command after leading ``cd …&&`` steps and variable assignments."""
    for step in re.split(r"&&|;", command):
        step = re.sub(r"^(?:\w+=\S*\s+)+", "", step.strip())
        if step and not step.startswith("cd "):
            return step
    return command


def output_kind(tool: str, arguments: Any, text: str) -> str:
    name = tool.lower()
    command = command_of(arguments)
    program = _first_program(command) if command else ""
    if is_grep_like(text.split("\n")) or name in _GREP_TOOLS or _GREP_COMMAND.match(program):
        return "grep"
    if name in _READ_TOOLS or _READ_COMMAND.match(program):
        return "read"
    if command is not None or name in _SHELL_TOOLS:
        if (command and _TEST_COMMAND.search(command)) or _TEST_LINES.search(text):
            return "test/build log"
        return "other shell"
    return "other"


# --- evaluation ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scored:
    """One labelled output after its run end's decisions."""

    session: str
    call_id: str
    label: str
    kind: str
    large: bool
    chars: int
    removed_chars: int
    action: str
    reason: str
    superseded: bool  # the pipeline found a newer version
    needed: frozenset[int]
    kept: frozenset[int]  # needed lines still in the window
    lines: tuple[str, ...] = field(repr=False)


@dataclass(frozen=True)
class ExchangeScored:
    """One old exchange as a run-end pass judged it."""

    session: str
    prompt: str
    needed: bool  # the run the new request started used it
    used_later: bool  # any later request or assistant message used it
    judged_unrelated: bool  # the judge's call (before the break-even gate)
    omitted: bool  # what the window does after the gate
    chars: int
    removed_chars: int


def run_end_prefixes(entries: Sequence[Entry]) -> Iterator[tuple[int, int, list[Entry]]]:
    """(run start, run end, the entries a run-end pass sees) for every run that finished."""
    messages = [m for _, m in entries]
    starts = run_starts(messages)
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(messages)
        last = next((m for m in reversed(messages[start:end]) if role(m) == "assistant"), None)
        if last is None or tool_calls(last) or last.get("stopReason") in ("aborted", "error"):
            continue
        if end < len(messages):
            yield start, end, list(entries[:end + 1])
        else:
            yield start, end, [*entries, ("eval:end", {"role": "user", "content": ""})]


Decide = Callable[[list[Entry], Plan | None], Mapping[str, Decision]]


def local_decisions(prefix: list[Entry], plan: Plan | None) -> dict[str, Decision]:
    """The local judge's decisions at one run end (what ``select_context`` would make)."""
    if plan is None:
        return {}
    return {d.target: d for d in decide_plan(plan, judge_plan(plan, LocalJudge()))}


def evaluate(entries: Sequence[Entry], session: str, config: DistillConfig | None = None,
             decide: Decide = local_decisions,
             exchanges: list[ExchangeScored] | None = None) -> list[Scored]:
    """Every labelled output of every finished run of one session, after its run end.
    ``decide`` gives the decisions of one run end (by default the local judge's); the old
    exchanges each run end judged are added to ``exchanges`` when it is given."""
    config = config or DistillConfig()
    labels = label_session(entries)
    exchange_labels = ExchangeLabels(entries) if exchanges is not None else None
    excluded = {t.lower() for t in config.exclude_tools}
    out: list[Scored] = []
    for start, end, prefix in run_end_prefixes(entries):
        plan = plan_run_end(prefix, config)
        decisions = decide(prefix, plan)
        if exchange_labels is not None and exchanges is not None and plan is not None:
            exchanges += _exchanges(session, plan, decisions, exchange_labels, end)
        chunks = {} if plan is None else {o.item.call_id: o.chunks for o in plan.large}
        items = [] if plan is None else [*(o.item for o in plan.large), *plan.small]
        out_of_date = {item.call_id for item in items if item.superseded}
        calls = {c["id"]: c for _, m in prefix[start:end] for c in tool_calls(m)}
        for _, message in prefix[start:end]:
            text = text_of(message)
            call_id = str(message.get("toolCallId"))
            tool = str(message.get("toolName") or "tool")
            if role(message) != "toolResult" or len(text) < 400 or tool.lower() in excluded:
                continue
            needed = labels.get(call_id, frozenset())
            decision = decisions.get(call_id)
            out.append(Scored(
                session, call_id, decision.label if decision else tool,
                output_kind(tool, calls.get(call_id, {}).get("arguments", {}), text),
                len(text) >= config.min_result_chars, len(text),
                decision.saved_chars if decision else 0,
                decision.action if decision else "keep",
                decision.reason if decision else "not a candidate", call_id in out_of_date,
                needed, _still_shown(needed, decision, chunks.get(call_id, ())),
                tuple(text.split("\n"))))
    return out


def _exchanges(session: str, plan: Plan, decisions: Mapping[str, Decision],
               labels: ExchangeLabels, request: int) -> list[ExchangeScored]:
    starts = run_starts(labels.messages)
    k = bisect.bisect_right(starts, request)
    next_run_end = starts[k] if k < len(starts) else len(labels.messages)
    out = []
    for item in plan.exchanges:
        decision = decisions.get(item.history_id)
        if decision is None:
            continue
        out.append(ExchangeScored(
            session, item.prompt[:60],
            labels.used(item.index, item.end, request, next_run_end),
            labels.used(item.index, item.end, request),
            decision.reason in ("unrelated", "deferred"), decision.action == "omit_exchange",
            item.chars, decision.saved_chars))
    return out


def exchange_report(rows: Sequence[ExchangeScored]) -> str:
    needed = [r for r in rows if r.needed]
    spare = [r for r in rows if not r.needed]
    kept = sum(1 for r in needed if not r.judged_unrelated)
    lost = sum(1 for r in needed if r.omitted)
    later = sum(1 for r in rows if r.omitted and r.used_later)
    return "\n".join([
        "", "[old exchanges, judged at each run end (one row per exchange and run end)]",
        f"  judged {len(rows)}; needed by the run the new request started {len(needed)}",
        f"  needed judged related           {kept:>5}/{len(needed):<5} "
        f"({ratio(kept, len(needed)):6.1%})   omitted after the gate {lost}",
        f"  unneeded judged unrelated       "
        f"{sum(1 for r in spare if r.judged_unrelated):>5}/{len(spare):<5} "
        f"({ratio(sum(1 for r in spare if r.judged_unrelated), len(spare)):6.1%})   "
        f"omitted after the gate {sum(1 for r in spare if r.omitted)}",
        f"  characters left out             {sum(r.removed_chars for r in rows):>9,}/"
        f"{sum(r.chars for r in rows):<10,} "
        f"({ratio(sum(r.removed_chars for r in rows), sum(r.chars for r in rows)):6.1%})",
        f"  omitted, and used again in some later run (recall's job): {later} of "
        f"{sum(1 for r in rows if r.omitted)}",
    ])


def _still_shown(lines: frozenset[int], decision: Decision | None,
                 chunks: Sequence[Chunk]) -> frozenset[int]:
    """The lines among ``lines`` that the window still shows after ``decision``."""
    if decision is None or decision.action == "keep":
        return lines
    if decision.action != "distill":
        return frozenset()
    kept = set(decision.kept)
    return lines & {k for c in chunks if c.index in kept for k in range(c.start, c.end)}


def _row(name: str, rows: Sequence[Scored], small: bool) -> str:
    needed = sum(len(r.needed) for r in rows)
    kept = sum(len(r.kept) for r in rows)
    chars = sum(r.chars for r in rows)
    removed = sum(r.removed_chars for r in rows)
    line = (f"  {name:<22} {len(rows):>4} {sum(1 for r in rows if r.needed):>6}   "
            f"{kept:>5}/{needed:<5} ({ratio(kept, needed):6.1%})   "
            f"{removed:>9,}/{chars:<10,} ({ratio(removed, chars):6.1%})")
    if small:
        wanted = [r for r in rows if r.needed]
        spare = [r for r in rows if not r.needed]
        wanted_kept = sum(1 for r in wanted if r.action == "keep")
        spare_removed = sum(1 for r in spare if r.action != "keep")
        line += (f"   {wanted_kept:>3}/{len(wanted):<3} kept, "
                 f"{spare_removed:>3}/{len(spare):<3} removed")
    return line


def report(rows: Sequence[Scored], sessions: int, runs: int, judge: str = "LOCAL") -> str:
    out = [
        f"The {judge} judge on labels mined from the session fixtures (bench/fixture_eval.py",
        "docstring: a line is needed when a later turn reproduced a distinctive piece of it).",
        f"{sessions} sessions, {runs} finished runs judged at run end with the default "
        "DistillConfig; outputs >= 400 chars",
        "(edit/write excluded). Needed kept = needed lines still in the window after the "
        "decisions (target 100%);",
        "chars removed = original minus replacement, over all outputs of the row.",
    ]
    header = (f"  {'kind':<22} {'outs':>4} {'needed':>6}   {'needed lines kept':<20}   "
              f"{'chars removed':<29}")
    for large, title in ((True, "large outputs (>= 4,000 chars, chunked)"),
                         (False, "small outputs (400-4,000 chars, whole)")):
        out += ["", f"[{title}]", header + ("   needed outputs / unneeded outputs"
                                             if not large else "")]
        group = [r for r in rows if r.large == large]
        for kind in KINDS:
            mine = [r for r in group if r.kind == kind]
            if mine:
                out.append(_row(kind, mine, not large))
        out.append(_row("all", group, not large))
    out += ["", _row("all outputs", rows, False)]
    lost = sum(len(r.needed - r.kept) for r in rows)
    stale = sum(len(r.needed - r.kept) for r in rows if r.superseded)
    out.append(f"  needed lines lost: {lost}, of them {stale} in out-of-date outputs "
               "(superseded: a later edit, re-read or re-run)")
    return "\n".join(out)


def losses(rows: Sequence[Scored]) -> str:
    out = []
    for r in rows:
        for k in sorted(r.needed - r.kept):
            stale = " superseded" if r.superseded else ""
            out.append(f"{r.session} {r.call_id} {r.action} ({r.reason}{stale}) "
                       f"{r.label[:60]!r} line {k + 1}: {r.lines[k][:120]!r}")
    return "\n".join(out) or "no needed line was lost"


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fixtures", type=Path, default=FIXTURES)
    parser.add_argument("--losses", action="store_true", help="list every needed line lost")
    args = parser.parse_args(argv)
    rows: list[Scored] = []
    exchanges: list[ExchangeScored] = []
    paths = sorted(
        require(args.fixtures, hint=f"pass --fixtures DIR or set {ENV}").rglob("*.jsonl"))
    runs = 0
    for path in paths:
        entries = session_entries(path)
        runs += sum(1 for _ in run_end_prefixes(entries))
        rows += evaluate(entries, path.name, exchanges=exchanges)
    print(report(rows, len(paths), runs))
    print(exchange_report(exchanges))
    if args.losses:
        print("\n" + losses(rows))


if __name__ == "__main__":
    main()
