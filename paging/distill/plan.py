"""One distillation pass: plan what to judge, judge it, decide (docs/distillation.md).

The server calls this before every model request with the conversation as ``(history_id,
message)`` entries (see :mod:`paging.distill.conversation`) and every decision made so far (a
later decision for the same target replaces an earlier one). The pass decides by itself which
kind it is:

* **run end** — the conversation ends with a new request (no assistant message after the last
  prompt) and the run before it finished with an answer: that run's outputs are judged against
  its question and final answer (the new request rides along as ``follow_up``); old exchanges
  before that run and old images are judged too. Large outputs totalling under
  ``min_run_chars`` are skipped; exchange omissions and images from before the run pass the
  run-end break-even gate or are deferred.
* **mid-run checkpoint** — the run in progress last called tools and has all their results:
  outputs at least ``mid_run_min_age_turns`` turns old, exchanges and images, in the first of
  upstream's three tiers that reaches the batch size and pays off
  (docs/distillation.md, "Mid-run checkpoints and break-even").

Memo (with explicit status instead of reason strings): an output with an edit, or with a
judged ``keep`` (mid-run: from any phase; run end: from a run-end pass), is not judged again; a
``keep`` made at a checkpoint is judged again at run end; an exchange kept for this run is not
judged again in this run; failures and deferrals are asked again.

The rewrite cost follows the way this server's hosts cache: a prefix stays cached up to the
first edited message (factor 16). ``provider="openai-codex"`` re-reads the whole context after
any edit (factor 13) and uses ``mid_run_batch_chars_openai``. Upstream's Anthropic question pin
and read/write anchors are Pi's and have no counterpart here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from context_paging.paging.distill.chunk import Chunk, chunk_output, segment_chars, segment_chunks
from context_paging.paging.distill.config import DistillConfig
from context_paging.paging.distill.conversation import (
    Entry,
    Message,
    Read,
    assistant_count,
    assistant_texts,
    calls_of,
    content_chars,
    dumps,
    images_of,
    is_interrupted,
    prompt_text,
    question_of,
    role,
    run_starts,
    text_of,
    tool_calls,
)
from context_paging.paging.distill.decide import (
    FACTOR_PREFIX,
    FACTOR_WHOLE_CONTEXT,
    pays_off,
    rewrite_chars,
)
from context_paging.paging.distill.items import (
    Exchange,
    ImageItem,
    OutputItem,
    batch_items,
    collect_exchanges,
    collect_images,
    collect_sized,
    exchange_item_size,
    small_item_size,
    with_facts,
)
from context_paging.paging.distill.model import Decision, JudgeContext, Phase, Question, fingerprint
from context_paging.paging.distill.render import clip, format_chars
from context_paging.paging.distill.scan import RunMemo, Scan

WHOLE_CONTEXT_PROVIDERS = frozenset({"openai-codex"})


@dataclass(frozen=True, slots=True)
class Segment:
    """One judge call: ``key`` names it in the verdicts; chunk indexes are the ids to score."""

    key: str
    chunks: tuple[Chunk, ...]
    context: JudgeContext
    oversize: bool = False  # one chunk above max_segment_chars: never sent, kept whole


@dataclass(frozen=True, slots=True)
class LargeOutput:
    item: OutputItem
    chunks: tuple[Chunk, ...]
    segments: tuple[Segment, ...]


@dataclass(frozen=True, slots=True)
class Plan:
    phase: Phase
    run_id: str  # history id of the judged run's prompt
    run_start: int
    config: DistillConfig
    question: Question
    large: tuple[LargeOutput, ...]
    small: tuple[OutputItem, ...]
    exchanges: tuple[Exchange, ...]
    images: tuple[ImageItem, ...]
    batches: tuple[Segment, ...]  # small-output and exchange batches; chunk i = item i
    batch_items: Mapping[str, tuple[int, ...]]  # batch key -> item indexes in small/exchanges
    fingerprints: Mapping[int, str]  # entry index -> content fingerprint (prompts, images)
    sizes: tuple[int, ...]  # content chars per entry, for break-even
    turns: int  # assistant messages in the conversation
    whole_context: bool
    factor: int
    # Entry indexes of large outputs this pass leaves unjudged: older than ``reach`` (see
    # plan_pass); their decisions are not made now and they stay as they are.
    deferred: tuple[int, ...] = ()

    @property
    def segments(self) -> tuple[Segment, ...]:
        """Every segment a judge must answer (oversize ones are never sent)."""
        large = tuple(s for out in self.large for s in out.segments if not s.oversize)
        return large + self.batches

    def rewrite(self, positions: Sequence[int]) -> int:
        return rewrite_chars(self.sizes, positions, self.whole_context)


def latest(decisions: Iterable[Decision]) -> dict[str, Decision]:
    """The decision in force per target: the last one given."""
    out: dict[str, Decision] = {}
    for decision in decisions:
        out[decision.target] = decision
    return out


def message_fingerprint(message: Message) -> str:
    """What a decision was made on: the text and the image data of a message."""
    return fingerprint(text_of(message), *(str(b.get("data", "")) for b in images_of(message)))


def plan_pass(
    entries: Sequence[Entry],
    config: DistillConfig,
    decisions: Iterable[Decision] = (),
    *,
    provider: str | None = None,
    reach: int = 0,
    reads: Sequence[Read] | None = None,
    scan: Scan | None = None,
) -> Plan | None:
    """What this pass judges, or None when there is nothing to do now.

    ``reads``: each entry's :class:`~paging.distill.conversation.Read`, when the caller has
    them (the window keeps them per message, so a re-sent prefix is not read again); ``scan``:
    the entries' :class:`~paging.distill.scan.Scan` (with ``reads``), which answers the walks
    over the whole conversation from what the previous call already read.

    ``reach``: large outputs at entries before it are planned (they count towards the batch
    and run-size rules exactly as always) but not judged: the caller knows the window cannot
    hold them. A run-end pass with exchanges or images judges everything, because its
    break-even gate weighs the other edits' positions."""
    if not config.enabled:
        return None
    ids = [str(i) for i, _ in entries]
    messages = [m for _, m in entries]
    if reads is None:
        scan = None
    starts = run_starts(messages) if scan is None else scan.starts
    if not starts:
        return None
    current = starts[-1]
    whole = provider in WHOLE_CONTEXT_PROVIDERS
    if (assistant_count(messages, current) if scan is None
            else scan.assistant_count(current)) == 0:
        if len(starts) < 2 or not _finished(messages, starts[-2], current):
            return None
        return _plan(ids, messages, config, latest(decisions), "run-end", starts[-2], current,
                     whole, reach, starts, reads, scan)
    if config.mid_run and _between_tool_turns(messages, current, scan):
        return _plan(ids, messages, config, latest(decisions), "mid-run", current,
                     len(messages), whole, reach, starts, reads, scan)
    return None


def _finished(messages: Sequence[Message], start: int, end: int) -> bool:
    last = next((m for m in reversed(messages[start:end]) if role(m) == "assistant"), None)
    return last is not None and not is_interrupted(last) and not tool_calls(last)


def _between_tool_turns(messages: Sequence[Message], start: int,
                        scan: Scan | None = None) -> bool:
    """The run's last assistant called tools, did not fail, and every result is in. (The
    caller knows the run has an assistant message.)"""
    index = (max(i for i in range(start, len(messages)) if role(messages[i]) == "assistant")
             if scan is None else scan.assistants[-1])
    wanted = {c["id"] for c in tool_calls(messages[index])}
    if not wanted or is_interrupted(messages[index]):
        return False
    got = {m.get("toolCallId") for m in messages[index + 1:] if role(m) == "toolResult"}
    return wanted <= got


def _settled(decision: Decision | None, phase: Phase, run_id: str) -> bool:
    if decision is None:
        return False
    if decision.edits:
        return True
    if not decision.judged:
        return False
    if decision.kind == "exchange":
        return decision.run == run_id
    return phase == "mid-run" or decision.phase == "run-end"


def _plan(
    ids: list[str], messages: list[Message], config: DistillConfig,
    known: dict[str, Decision], phase: Phase, start: int, end: int, whole: bool,
    reach: int, starts: Sequence[int], reads: Sequence[Read] | None = None,
    scan: Scan | None = None,
) -> Plan | None:
    """The pass's plan; ``starts`` are the conversation's ``run_starts``, ``reads`` the
    entries' :class:`Read` and ``scan`` their :class:`Scan` when the caller has them. Counts
    and run starts are read once here and handed to the steps that need them."""
    run_id = ids[start]
    skip = {t for t, d in known.items() if _settled(d, phase, run_id)}
    youngest = None
    if scan is None:
        run_turns = assistant_count(messages, start)
        all_turns = run_turns + assistant_count(messages, 0, start)
    else:
        run_turns, all_turns = scan.assistant_count(start), scan.assistant_count()
    if phase == "mid-run":
        youngest = run_turns - 1 - config.mid_run_min_age_turns
    memo = None if scan is None or reads is None else scan.run(messages, reads, start, end)
    # read once for both sizes of output
    calls = calls_of(messages, start, end, reads) if memo is None else memo.calls
    # both sizes of output in one walk over the run
    kept = {} if memo is None else {"candidates": memo.candidates, "counted": memo.counted}
    large, small = collect_sized(messages, start, end, config, youngest=youngest, skip=skip,
                                 reach=reach, calls=calls, reads=reads, **kept)
    if phase == "run-end" and sum(len(i.text) for i in large) < config.min_run_chars:
        large = []
    exchanges = (collect_exchanges(ids, messages, start, config.keep_recent_exchanges, skip,
                                   starts=starts,
                                   sizes=(None if reads is None else [r.chars for r in reads])
                                   if scan is None else scan.sizes,
                                   memo=None if scan is None else scan.exchanges)
                 if config.prune_exchanges else [])
    images = collect_images(messages, config.image_keep_turns, skip, turns=all_turns,
                            reads=reads, scan=scan)
    if not (large or small or exchanges or images):
        return None  # the common case on the hot path: nothing measured
    sizes = (tuple(content_chars(m) for m in messages) if reads is None
             else tuple(r.chars for r in reads) if scan is None else tuple(scan.sizes))
    factor = FACTOR_WHOLE_CONTEXT if whole else FACTOR_PREFIX
    if phase == "mid-run":
        tier = _tier(messages, run_turns, config, large + small, exchanges, images, sizes,
                     whole, factor, None if scan is None else scan.users[-1])
        if tier is None:
            return None
        exchanges, images = tier
    if not (large or small or exchanges or images):
        return None
    texts = (assistant_texts(messages, start, end, reads) if memo is None
             else [text for _, text in memo.notes])
    earlier = _history(messages, start, config.history_exchanges, starts,
                       None if scan is None else scan.summaries,
                       None if scan is None or reads is None
                       else lambda a, b: scan.run(messages, reads, a, b))
    if phase == "run-end":
        question = Question(_question(messages, start, end, memo),
                            answer=texts[-1] if texts else "",
                            notes="\n\n".join(texts[:-1]),
                            follow_up=_question(messages, end, len(messages),
                                                None if scan is None or reads is None
                                                else scan.run(messages, reads, end,
                                                              len(messages))), **earlier)
    else:
        question = Question(_question(messages, start, end, memo),
                            latest_note=texts[-1] if texts else "",
                            notes="\n\n".join(texts[:-1]), **earlier)
    batches, members = _batches(phase, config, small, exchanges)
    prints = {e.index: message_fingerprint(messages[e.index]) for e in exchanges}
    prints |= {im.index: message_fingerprint(messages[im.index]) for im in images}
    if phase == "run-end" and (exchanges or images) and config.exchange_break_even and reach:
        # the gate weighs every edit: judge every output, with its full facts
        large, reach = with_facts(large, calls, reach), 0
    return Plan(phase, run_id, start, config, question,
                tuple(_large(phase, config, item) for item in large if item.index >= reach),
                tuple(small), tuple(exchanges), tuple(images), batches, members, prints, sizes,
                all_turns, whole, factor,
                tuple(item.index for item in large if item.index < reach))


def _tier(
    messages: list[Message], turns: int, config: DistillConfig, outputs: list[OutputItem],
    exchanges: list[Exchange], images: list[ImageItem], sizes: tuple[int, ...],
    whole: bool, factor: int, last_user: int | None = None,
) -> tuple[list[Exchange], list[ImageItem]] | None:
    """Upstream's checkpoint tiers: all exchanges and images; images only; only the images
    after the last user message (``last_user``, when the caller knows it). The first that
    reaches the batch size and pays off wins. ``turns``: the run's assistant messages (the
    current turn + 1)."""
    batch = config.mid_run_batch_chars_openai if whole else config.mid_run_batch_chars
    if last_user is None:
        last_user = max(i for i, m in enumerate(messages) if role(m) == "user")
    pending = sum(len(o.text) for o in outputs)
    recent = [im for im in images if im.index > last_user]
    for tier_exchanges, tier_images in ((exchanges, images), ([], images), ([], recent)):
        chars = (pending + sum(max(0, im.before - im.after) for im in tier_images)
                 + sum(e.chars for e in tier_exchanges))
        if chars <= 0 or chars < batch:
            continue
        positions = ([o.index for o in outputs] + [im.index for im in tier_images]
                     + [e.index for e in tier_exchanges])
        rewrite = rewrite_chars(sizes, positions, whole)
        if config.mid_run_break_even and not pays_off(chars, turns, rewrite, factor):
            continue
        return list(tier_exchanges), list(tier_images)
    return None


def _question(messages: Sequence[Message], start: int, end: int, memo: RunMemo | None) -> str:
    """``question_of``, from the run's memo when the span is that run's."""
    if memo is None:
        return question_of(messages, start, end)
    return "\n\n".join([prompt_text(messages[start]), *(text for _, text in memo.steering)])


def _history(messages: list[Message], start: int, count: int, runs: Sequence[int],
             summarized: Sequence[int] | None = None,
             memo_of: Callable[[int, int], RunMemo | None] | None = None) -> dict:
    """Earlier conversation for the judges: the last ``count`` exchanges before the run, the
    first request and the latest compaction summary (``count`` 0 sends none of them);
    ``runs`` are the conversation's ``run_starts``, ``summarized`` the positions of its
    compaction summaries and ``memo_of`` the kept runs (``Scan.run``) when the caller has
    them."""
    if count <= 0:
        return {}
    starts = [i for i in runs if i < start]
    bounds = [*starts, start]
    recent = []
    for a, b in list(zip(bounds, bounds[1:], strict=False))[-count:]:
        memo = None if memo_of is None else memo_of(a, b)
        answers = (assistant_texts(messages, a, b) if memo is None
                   else [text for _, text in memo.notes])
        recent.append((clip(_question(messages, a, b, memo), 800),
                       clip(answers[-1], 1_200) if answers else ""))
    first = ""
    if len(starts) > count:
        first = clip(_question(messages, starts[0], bounds[1], None if memo_of is None
                               else memo_of(starts[0], bounds[1])), 1_000)
    summaries = ([str(m.get("summary", "")) for m in messages[:start]
                  if role(m) == "compactionSummary"] if summarized is None
                 else [str(messages[i].get("summary", "")) for i in summarized if i < start])
    return {"history": tuple(recent), "first_request": first,
            "summary": clip(summaries[-1], 2_000) if summaries else ""}


@functools.lru_cache(maxsize=64)
def _chunks(text: str) -> tuple[Chunk, ...]:
    """``chunk_output`` of a large output's text, remembered by the text: every call plans the
    outputs within reach again, and from one call to the next they are mostly the same ones.
    (A few large texts are held; outputs beyond reach are never chunked.)"""
    return tuple(chunk_output(text))


def prepare_output(text: str) -> tuple[Chunk, ...]:
    """Chunk a large output's text into the cache a pass reads it from (spare time; nothing
    a pass decides depends on whether this ran)."""
    return _chunks(text)


def _large(phase: Phase, config: DistillConfig, item: OutputItem) -> LargeOutput:
    chunks = _chunks(item.text)
    parts = segment_chunks(chunks, config.max_segment_chars, config.max_chunks_per_segment)
    total_lines = chunks[-1].end if chunks else 0
    segments = tuple(
        Segment(
            f"output:{item.call_id}:{n}",
            part,
            JudgeContext("output", phase, (item.label,), (item.superseded,), (item.is_error,),
                         item.tool, _arguments(item), item.later_calls, total_lines, n,
                         len(parts)),
            oversize=segment_chars(part) > config.max_segment_chars,
        )
        for n, part in enumerate(parts, 1)
    )
    return LargeOutput(item, chunks, segments)


def _arguments(item: OutputItem) -> str:
    text = dumps(dict(item.arguments)) if item.arguments else ""
    return text if len(text) <= 600 else text[:600] + "…"


def _batches(
    phase: Phase, config: DistillConfig, small: list[OutputItem], exchanges: list[Exchange]
) -> tuple[tuple[Segment, ...], dict[str, tuple[int, ...]]]:
    segments: list[Segment] = []
    members: dict[str, tuple[int, ...]] = {}
    limit, count = config.max_segment_chars, config.max_chunks_per_segment
    for n, batch in enumerate(batch_items([small_item_size(s) for s in small], limit, count), 1):
        items = [small[i] for i in batch]
        chunks = tuple(Chunk(k, 0, it.text.count("\n") + 1, it.text) for k, it in enumerate(items))
        context = JudgeContext("small", phase, tuple(it.label for it in items),
                               tuple(it.superseded for it in items),
                               tuple(it.is_error for it in items))
        segments.append(Segment(f"small:{n}", chunks, context))
        members[f"small:{n}"] = tuple(batch)
    sizes = [exchange_item_size(e) for e in exchanges]
    for n, batch in enumerate(batch_items(sizes, limit, count), 1):
        items = [exchanges[i] for i in batch]
        chunks = tuple(Chunk(k, 0, 0, _exchange_text(e)) for k, e in enumerate(items))
        labels = tuple(f"{e.messages} messages, about {format_chars(round(e.chars / 4))} tokens"
                       for e in items)
        segments.append(Segment(f"exchange:{n}", chunks, JudgeContext("exchange", phase, labels)))
        members[f"exchange:{n}"] = tuple(batch)
    return tuple(segments), members


def _exchange_text(exchange: Exchange) -> str:
    calls = list(exchange.tool_calls[:20])
    if len(exchange.tool_calls) > 20:
        calls.append(f"… {len(exchange.tool_calls) - 20} more")
    return (f"user prompt: {exchange.prompt}\nfinal answer: {exchange.answer}\n"
            f"tool calls: {'; '.join(calls) if calls else 'none'}")
