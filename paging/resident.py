"""Which items of a request are resident input, per format: the one table.

Resident input is what an agent sends on every request as its standing context (instructions,
tool lists, settings, the environment). It is counted in the budget, never evicted and never
stored as history, and it keeps its place among the kept messages. Everything else is
conversation, which the window may cut. docs/agents.md lists what each agent sends.

- **Anthropic**: every ``role: "system"`` message inside ``messages`` (Claude Code's default
  model sends its agent listing there, and reminders after tool results). They carry no user
  request and no tool pairing, and the agent re-sends them each request, so none is history.
- **Responses**: developer and system messages; user messages that are set-up rather than a
  request (``<environment_context>``, AGENTS.md, skills …); and every item whose type is not
  known to be conversation — ``additional_tools``, ``configuration_update`` and any type added
  later. Unknown means resident: dropping an item the model needs is worse than keeping one it
  does not.
- **Chat**: ``system`` and ``developer`` messages.
- **Pi** messages (the ``select_context`` tool's own shape) have no resident items.
- **Gemini** turns are read in the Anthropic shape (the proxy's ``server/proxy/gemini.py``), so
  the Anthropic row holds for them: ``systemInstruction`` and ``tools`` are the resident input
  and no turn is (a turn has no system role); Gemini CLI's opening ``<session_context>`` parts
  travel with the notice instead, as Claude Code's ``<system-reminder>`` blocks do.

The session readers use the same facts (``index/sources/codex.py``) so a session file and a
proxied request agree on what is conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

# Responses item types that are conversation: messages, the model's own items and the outputs
# that answer its calls. Any other type is resident.
RESPONSES_CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
RESPONSES_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output",
                               "local_shell_call_output"})
RESPONSES_MODEL = RESPONSES_CALLS | {
    "reasoning", "web_search_call", "compaction", "item_reference", "mcp_call",
    "image_generation_call", "code_interpreter_call", "file_search_call", "computer_call"}
RESPONSES_CONVERSATION = RESPONSES_MODEL | RESPONSES_OUTPUTS | {"message"}

# How Codex's set-up messages (user role, not a request) begin; compared lower-cased.
AGENT_CONTEXT_PREFIXES = (
    "<environment_context>", "<user_instructions>", "# agents.md instructions",
    "<permissions instructions>", "<app-context>", "<collaboration_mode>",
    "<skills_instructions>", "<plugins_instructions>", "<subagent_notification>",
    "<subagent_context>", "<codex_internal_context", "<goal_context>", "<additional_context>",
    "<turn_aborted>", "<skill>", "<recommended_plugins>", "<model_switch>", "<hook_prompt",
    "<multi_agent_mode>", "<external_", "<legacy_", "========= memory_summary begins",
)


def is_agent_context(item: dict[str, Any]) -> bool:
    """A Responses user message made only of set-up texts (environment, AGENTS.md …)."""
    if item.get("type", "message") != "message" or item.get("role") != "user":
        return False
    content = item.get("content")
    texts = [content] if isinstance(content, str) else [
        b.get("text") for b in content or () if isinstance(b, dict)]
    return bool(texts) and all(
        isinstance(t, str) and t.lstrip().lower().startswith(AGENT_CONTEXT_PREFIXES)
        for t in texts)


def is_resident(item: Any, fmt: str) -> bool:
    """Whether one request item is resident input in ``fmt`` (see the module docstring)."""
    if not isinstance(item, dict):
        return False
    role = item.get("role")
    if fmt == "anthropic":
        return role == "system"
    if fmt == "openai":
        return role in ("system", "developer")
    if fmt != "responses":
        return False
    kind = item.get("type", "message")
    if kind not in RESPONSES_CONVERSATION:
        return True
    if kind == "message":
        return role not in ("user", "assistant") or is_agent_context(item)
    return False


def resident_indexes(items: Sequence[Any], fmt: str, start: int = 0) -> list[int]:
    """The indexes (from ``start`` on) of the resident items of a request."""
    return [i for i in range(start, len(items)) if is_resident(items[i], fmt)]
