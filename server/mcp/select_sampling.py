"""select_context's sampling judge over MCP (server/mcp/sampling.py): the resolver that lists the
prompts a 2026-era call asks, its answer slots, and the judge a call runs with."""

from __future__ import annotations

import functools
import inspect
import logging
import typing
from collections.abc import Callable
from typing import Annotated, Any

from context_paging.server.mcp.binding import Deps, bind
from context_paging.server.mcp.sampling import (
    Prompt,
    Sampler,
    SamplingJudge,
    can_sample,
    uses_input_required,
)
from mcp.server.mcpserver import Context, Resolve, Sample

log = logging.getLogger("context_paging")


async def _sampling_prompts(deps: Deps, session: str, messages: list, format: str,
                            ephemeral: list | None, model: str | None, after_id: str | None,
                            ctx: Context) -> list[Prompt]:
    """2026-era connections: the prompts this call's resolver slots ask (server/sampling)."""
    sampler = deps.sampler
    if not (sampler.slots and uses_input_required(ctx) and can_sample(ctx)):
        return []
    try:
        plan = await deps.run(deps.history.distill_plan, session, messages, format,
                              ephemeral or (), model, after_id, recovery=False)
    except Exception:  # the tool body reports a bad request with its proper error
        return []
    return sampler.prompts(plan)[: sampler.slots]


def _sampling_slot(sampler: Sampler, prompts_param: Any,
                   k: int) -> Callable[..., Sample | None]:
    def ask(prompts: list, ctx: Context) -> Sample | None:
        if k >= len(prompts):
            return None
        return sampler.sample(prompts[k], fresh_round=ctx.request_state is None)

    ask.__annotations__ = {"prompts": prompts_param, "ctx": Context, "return": Sample | None}
    ask.__qualname__ = f"sampling_slot_{k}"
    return ask


async def judge_for(deps: Deps, ctx: Context, prompts: list[Prompt], samples: dict[str, Any],
                     session: str, messages: list, fmt: str, ephemeral: list[int] | None,
                     model: str | None, after_id: str | None = None) -> SamplingJudge | None:
    """The sampling judge with this call's answers, or None (local) without sampling."""
    sampler = deps.sampler
    if not sampler.slots or not can_sample(ctx):
        return None
    if uses_input_required(ctx):
        results = {p.key: samples.get(f"sample_{k}") for k, p in enumerate(prompts)}
        return SamplingJudge(sampler.in_time(list(results), results), results, sampler)
    try:
        plan = await deps.run(deps.history.distill_plan, session, messages, fmt,
                              ephemeral or (), model, after_id, recovery=False)
    except Exception:  # select_context reports a bad request; anything else: local judge
        log.debug("no sampling plan for this call", exc_info=True)
        return None
    everything = sampler.prompts(plan)
    return SamplingJudge(await sampler.ask(ctx, everything), {p.key for p in everything},
                         sampler)


def _with_sampling_slots(fn: Callable[..., Any], slots: int, prompts_param: Any,
                         slot: Callable[[int], Callable[..., Any]]) -> None:
    """Give ``select_context`` its hidden sampling parameters (server/mcp/sampling.py): the prompt
    list and ``slots`` answers, each filled by a ``Resolve`` dependency, never by the caller
    (they are not in the tool's input schema). The function takes them as ``**samples``; its
    signature names them so the SDK can see them."""
    annotations = typing.get_type_hints(fn, include_extras=True)  # this module's strings
    annotations.pop("samples", None)
    signature = inspect.signature(fn)
    params = [p.replace(annotation=annotations.get(p.name, p.annotation))
              for p in signature.parameters.values()
              if p.kind is not inspect.Parameter.VAR_KEYWORD]
    if slots:
        annotations["sampling_prompts"] = prompts_param
        params = [p.replace(annotation=prompts_param) if p.name == "sampling_prompts" else p
                  for p in params]
        for k in range(slots):
            name = f"sample_{k}"
            annotations[name] = Annotated[Any, Resolve(slot(k))]
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None,
                                            annotation=annotations[name]))
    else:
        params = [p for p in params if p.name != "sampling_prompts"]
        annotations.pop("sampling_prompts", None)
    returns = annotations.get("return", signature.return_annotation)
    fn.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=params, return_annotation=returns)
    fn.__annotations__ = annotations


def with_sampling(fn: Callable[..., Any], deps: Deps) -> None:
    """select_context's hidden sampling parameters, for this server's sampler."""
    prompts = bind(_sampling_prompts, deps, translate=False)  # a resolver, not a tool
    prompts_param = Annotated[list, Resolve(prompts)]
    _with_sampling_slots(fn, deps.sampler.slots, prompts_param,
                         functools.partial(_sampling_slot, deps.sampler, prompts_param))
