"""One line per setting of ``server/config.py``'s ``SCHEMA``: what it does, for the generated
configuration reference (docs/configuration.md). A test keeps both lists the same."""

from __future__ import annotations

MEANINGS: dict[str, dict[str, str]] = {
    "paging": {
        "enabled": "Master switch: off, `select_context` and the proxy send every message",
        "token_budget": "The window's budget in tokens; past it, the oldest turns leave",
        "trim_to_tokens": "Where a cut trims down to; none means 5/8 of `token_budget`",
        "first_cut": "The first cut of a conversation lands at this share of the budget "
                     "(1.0: at the trim target)",
        "estimator": "Token counting: cl100k_base, or characters/4",
        "max_request_bytes": "The largest request line `serve` reads (and body the proxy "
                             "pages); larger ones are answered `REQUEST_TOO_LARGE` unparsed",
    },
    "distill": {
        "enabled": "Master switch for distillation",
        "judge": "Offline heuristics, or the host's model through MCP sampling (`local` when "
                 "the client cannot sample)",
        "model": "Sampling judge only: a model hint sent to the host as its model preference",
        "min_result_chars": "Outputs from this size are \"large\" (chunked)",
        "min_run_chars": "Large outputs are distilled at run end only if they total this much",
        "keep_whole_threshold": "Keep an output whole if P(keep whole) is at least this",
        "focus_whole_threshold": "Keep an output whole if its focus is \"whole\" with P at "
                                 "least this",
        "chunk_keep_threshold": "Keep a chunk if P is at least this (run end)",
        "none_threshold": "Remove an output if its focus is \"none\" with P at least this and "
                          "no chunk passes",
        "max_keep_ratio": "No edit when the kept part is more than this share of the original",
        "keep_cited_files": "Also keep grep chunks of files the final answer names",
        "timeout_ms": "Sampling judge: time for one pass's answers; late answers are ignored "
                      "and those items stay whole, to be asked again later",
        "concurrency": "Sampling judge: most sampling prompts per `select_context` call",
        "max_segment_chars": "Most chunk characters per judge request (also the item-batch "
                             "size)",
        "max_chunks_per_segment": "Most chunks per request (also items per batch)",
        "exclude_tools": "Tools whose outputs are never touched (non-strings are dropped)",
        "distill_errors": "Error results are candidates too",
        "history_exchanges": "Earlier exchanges given to the judge as context",
        "pin_anthropic_cache": "No effect in this server (cache breakpoints are the host's); "
                               "accepted so upstream's settings load unchanged",
        "mid_run": "Distill during a run, at checkpoints",
        "mid_run_min_age_turns": "An output is eligible mid-run once this many turns old",
        "mid_run_batch_chars": "A checkpoint needs at least this many eligible characters",
        "mid_run_batch_chars_openai": "The same, when `model` is `openai-codex/<id>` (that "
                                      "provider reads the whole context again after any edit)",
        "mid_run_chunk_keep_threshold": "Chunk threshold at checkpoints",
        "mid_run_break_even": "A checkpoint must pay for the prompt-cache rewrite it causes",
        "small_result_min_chars": "Outputs from this size up to `min_result_chars` are judged "
                                  "whole; 0 turns this off",
        "small_keep_threshold": "Keep a small output if P is at least this",
        "prune_exchanges": "Judge old exchanges and leave out the unrelated ones",
        "keep_recent_exchanges": "The last N exchanges before the current prompt are never "
                                 "judged",
        "exchange_omit_threshold": "Leave an exchange out only if P(relevant) is below this",
        "exchange_break_even": "Run-end cost gate for omitted exchanges and old images",
        "exchange_min_saving_chars": "Omitted exchanges must save at least this much at run end",
        "image_keep_turns": "Drop tool-result images once this many assistant messages follow; "
                            "0 turns this off",
    },
    "server": {
        "tools": "`recovery` lists only the model's recovery tools (what a chat client needs)",
        "select_context_text": "`select_context`'s text copy: the whole reply, or `summary`, "
                               "the reply without the window's messages",
    },
    "ledger": {
        "keep_days": "Ledger sessions not written for this many days are deleted when a server or "
                     "proxy starts, and by `forget --expired`; none keeps them until forgotten",
    },
    "sources": {
        "pi": "Where Pi keeps its session files (a missing folder is fine)",
        "claude_code": "Where Claude Code keeps its session files",
        "codex": "Where Codex keeps its session files",
        "gemini": "Where Gemini CLI keeps its chats (`<project>/chats/session-*.jsonl`)",
        "opencode": "Where OpenCode keeps its data (its sessions are in `opencode.db`)",
    },
}
