"""The ``sampling`` judge: the host's own model says which chunks to keep
(docs/distillation.md, "The judges").

With ``[distill] judge = "sampling"``, every segment a distillation pass would judge (one part of
a large output, a batch of small outputs, a batch of old exchanges) becomes one prompt
(:func:`paging.distill.prompt_for_segment`) asking the model for the numbers to keep, and the
reply is read with :func:`paging.distill.parse_chunk_ids`. How the prompts reach the model
depends on the connection's protocol era (docs/distillation.md, "The judges"; the 2026-07-28
protocol has no requests from server to client at all, only the SDK's resolver rounds):

* **2026-07-28 and later** — the SDK's era-portable form: ``select_context`` has
  ``concurrency`` hidden parameters filled by ``Resolve`` dependencies, each returning a
  ``Sample`` for one pending prompt (or nothing). The SDK batches them into one
  ``input_required`` round that the client answers (its library runs them concurrently), and the
  tool body gets the answers. Segments beyond the slots are judged by the local judge in the
  same call (recorded as ``local``), because the next call usually belongs to another run.
* **2025-era connections** (hosts that ``initialize``) — the tool body sends the
  ``sampling/createMessage`` requests itself, at most ``concurrency`` at once, because the SDK
  would send resolver requests one after another, with no time limit, and fail the whole call
  on one client error.

Both run under ``timeout_ms``: on a 2025 connection no request starts after the budget and
running ones are cancelled; on a 2026 one, an answer that comes back later than the budget after
its prompt was first sent is ignored. A client without the ``sampling`` capability gets the
local judge instead. Any failure — an error reply, an unreadable answer, a late one — leaves
that segment as it is (``keep``), recorded as not judged, so a later pass asks again; prompts
never asked before go first, so one segment that keeps failing cannot starve the others.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
from context_paging.paging.distill import (
    Chunk,
    DistillConfig,
    Judge,
    JudgeContext,
    LocalJudge,
    Question,
    Verdict,
    parse_chunk_ids,
    prompt_for_segment,
    scores_from_ids,
)
from mcp.server.mcpserver import Context, Sample
from mcp.shared.message import ServerMessageMetadata
from mcp.types import (
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    ModelHint,
    ModelPreferences,
    SamplingMessage,
    TextContent,
)
from mcp_types.version import is_version_at_least

if TYPE_CHECKING:  # the planner loads with the window, not with the server
    from context_paging.paging.distill import Plan

log = logging.getLogger("context_paging")
INPUT_REQUIRED_ERA = "2026-07-28"
MAX_TOKENS = 300  # a reply is a short JSON list of numbers
SYSTEM_PROMPT = ("You decide which parts of a coding agent's old tool output it still needs. "
                 "Reply with JSON only.")
REMEMBERED_PROMPTS = 4_096


def prompt_key(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).hexdigest()[:24]


@dataclass(frozen=True, slots=True)
class Prompt:
    key: str
    text: str


class SamplingJudge:
    """A :class:`paging.distill.Judge` over the answers the host's model gave in this call.

    A segment whose prompt was asked gets the model's answer, or no answer (``timeout``: keep,
    ask again on a later pass of the same run) when none came in time. A segment this call had
    no slot for is judged by ``fallback`` (the local judge) and recorded under its name.
    """

    name = "sampling"

    def __init__(self, answers: Mapping[str, str], asked: Collection[str],
                 sampler: Sampler | None = None, fallback: Judge | None = None) -> None:
        self.answers = answers
        self.asked = asked
        self.sampler = sampler
        self.fallback = fallback or LocalJudge()

    def verdict(self, question: Question, chunks: Sequence[Chunk],
                context: JudgeContext) -> Verdict:
        key = prompt_key(prompt_for_segment(question, chunks, context))
        if key not in self.asked:
            try:
                scores = self.fallback.judge(question, chunks, context)
            except Exception:
                return Verdict(None, self.fallback.name, "error")
            return Verdict(scores, self.fallback.name, "" if scores is not None else "no-answer")
        if key not in self.answers:
            return Verdict(None, self.name, "timeout")
        ids = parse_chunk_ids(self.answers[key], allowed={c.index for c in chunks})
        if ids is None:
            if self.sampler is not None:
                self.sampler.failed(key)
            return Verdict(None, self.name, "no-answer")  # an unreadable reply: keep
        return Verdict(scores_from_ids(ids, chunks), self.name)

    def judge(self, question: Question, chunks: Sequence[Chunk],
              context: JudgeContext) -> Mapping[int, float] | None:
        return self.verdict(question, chunks, context).scores


class Sampler:
    """Prompts, ask times and answers of the sampling judge, for one server process."""

    def __init__(self, config: DistillConfig) -> None:
        self.config = config
        self.asked: OrderedDict[str, float] = OrderedDict()  # prompt key -> first sent (monotonic)
        self.unanswered: OrderedDict[str, None] = OrderedDict()  # no usable answer last time
        # Resolvers run in worker threads, the tool body on the event loop, the judge in the
        # history's worker: every change of the two maps above holds this lock.
        self._lock = threading.Lock()

    @property
    def slots(self) -> int:
        """Prompts one ``select_context`` call may ask (the ``concurrency`` setting)."""
        return self.config.concurrency if self.config.judge == "sampling" else 0

    # --- what to ask ----------------------------------------------------------------------

    def prompts(self, plan: Plan | None) -> list[Prompt]:
        """The plan's prompts; those that got no usable answer last time go last. The order
        changes only when a call ends, so every round of one call asks the same prompts."""
        if plan is None:
            return []
        prompts = [Prompt(prompt_key(text), text) for text in
                   (prompt_for_segment(plan.question, s.chunks, s.context) for s in plan.segments)]
        with self._lock:
            return sorted(prompts, key=lambda p: p.key in self.unanswered)

    def failed(self, key: str) -> None:
        with self._lock:
            self.unanswered[key] = None
            self.unanswered.move_to_end(key)
            while len(self.unanswered) > REMEMBERED_PROMPTS:
                self.unanswered.popitem(last=False)

    def sample(self, prompt: Prompt, fresh_round: bool) -> Sample:
        """The ``Sample`` request for a prompt; a fresh round (re)starts its clock."""
        with self._lock:
            if fresh_round or prompt.key not in self.asked:
                self._sent(prompt.key)
        params = self._params(prompt)
        return Sample(params.messages, max_tokens=params.max_tokens,
                      system_prompt=params.system_prompt, temperature=params.temperature,
                      model_preferences=params.model_preferences)

    def _params(self, prompt: Prompt) -> CreateMessageRequestParams:
        hints = ModelPreferences(hints=[ModelHint(name=self.config.model)]) \
            if self.config.model else None
        return CreateMessageRequestParams(
            messages=[SamplingMessage(role="user",
                                      content=TextContent(type="text", text=prompt.text))],
            max_tokens=MAX_TOKENS, system_prompt=SYSTEM_PROMPT, temperature=0.0,
            model_preferences=hints,
        )

    def _sent(self, key: str) -> None:
        """Start ``key``'s clock (the caller holds the lock)."""
        self.asked[key] = time.monotonic()
        self.asked.move_to_end(key)
        while len(self.asked) > REMEMBERED_PROMPTS:
            self.asked.popitem(last=False)

    # --- what came back -------------------------------------------------------------------

    def in_time(self, asked: Sequence[str], results: Mapping[str, object]) -> dict[str, str]:
        """The text answers to the ``asked`` prompts that arrived within the budget of their
        prompt's first sending; the others are remembered as unanswered. An answer whose
        sending this process has no record of (restarted between rounds) cannot be shown to
        be in time, so it counts as late."""
        budget = self.config.timeout_ms / 1000
        now = time.monotonic()
        answers: dict[str, str] = {}
        for key in asked:
            with self._lock:
                sent = self.asked.pop(key, None)
            text = _text(results.get(key))
            if text is not None and (sent is None or now - sent > budget):
                log.info("sampling answer for %s came after the time budget; ignored", key)
                text = None
            if text is None:
                self.failed(key)
            else:
                with self._lock:
                    self.unanswered.pop(key, None)
                answers[key] = text
        return answers

    async def ask(self, ctx: Context, prompts: Sequence[Prompt]) -> dict[str, str]:
        """2025-era connections: send the prompts, ``concurrency`` at a time, under the budget;
        answers that did not arrive in time are simply missing."""
        results: dict[str, object] = {}
        limiter = anyio.CapacityLimiter(self.config.concurrency)

        async def one(prompt: Prompt) -> None:
            async with limiter:
                with self._lock:
                    self._sent(prompt.key)
                try:
                    results[prompt.key] = await ctx.session.send_request(
                        CreateMessageRequest(params=self._params(prompt)), CreateMessageResult,
                        metadata=ServerMessageMetadata(related_request_id=ctx.request_id),
                    )
                except Exception as exc:  # an error reply or a closed stream: keep that segment
                    log.info("sampling request failed: %s", exc)

        with anyio.move_on_after(self.config.timeout_ms / 1000):
            async with anyio.create_task_group() as group:
                for prompt in prompts:
                    group.start_soon(one, prompt)
        return self.in_time([p.key for p in prompts], results)


def can_sample(ctx: Context) -> bool:
    capabilities = ctx.client_capabilities
    return capabilities is not None and capabilities.sampling is not None


def uses_input_required(ctx: Context) -> bool:
    version = ctx.protocol_version
    return version is not None and is_version_at_least(version, INPUT_REQUIRED_ERA)


def _text(result: object) -> str | None:
    content = getattr(result, "content", None)
    if isinstance(content, list):  # a result that may carry several blocks
        texts = [c.text for c in content if isinstance(c, TextContent)]
        return "\n".join(texts) if texts else None
    return content.text if isinstance(content, TextContent) else None
