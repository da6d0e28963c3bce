"""One line per setting of ``server/config.py``'s ``SCHEMA``: what it does, for the generated
configuration reference (docs/configuration.md). A test keeps both lists the same."""

from __future__ import annotations

MEANINGS: dict[str, dict[str, str]] = {
    "paging": {
        "enabled": "Off: `select_context` and the proxy send every message, unpaged",
        "token_budget": "The window's budget in tokens; past it, the oldest turns leave",
        "trim_to_tokens": "How many tokens a cut leaves in the window; none means 5/8 of "
                          "`token_budget`",
        "first_cut": "Where a conversation's first cut lands, as a share of the budget (1.0: "
                     "where every later cut lands; smaller cuts deeper the first time)",
        "estimator": "How tokens are counted: a real tokenizer (`tiktoken`), or characters "
                     "divided by 4",
        "max_request_bytes": "The largest request line `serve` reads (and body the proxy "
                             "pages); larger ones are answered `REQUEST_TOO_LARGE` unparsed",
    },
    "distill": {
        "enabled": "Off: old tool outputs and exchanges are never shortened or left out",
        "judge": "Who decides what to keep: rules run here (`local`), or the host's own "
                 "model through MCP sampling (`local` when the client cannot sample)",
        "model": "Sampling judge only: a model hint sent to the host as its model preference",
        "min_result_chars": "Outputs from this size are \"large\" (chunked)",
        "min_run_chars": "Large outputs are distilled at run end only if they total this much",
        "keep_whole_threshold": "Keep an output whole if the judge's confidence that all of "
                                "it is needed is at least this (0 to 1)",
        "focus_whole_threshold": "Keep an output whole if the judge says \"all of it "
                                 "matters\" with at least this confidence",
        "chunk_keep_threshold": "Keep a part of an output if the judge's confidence it is "
                                "needed is at least this (at a run's end)",
        "none_threshold": "Remove an output if the judge says \"none of it matters\" with at "
                          "least this confidence and no part is kept",
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
                               "accepted so settings written for pi-context-paging load "
                               "unchanged",
        "mid_run": "Distill during a run, at checkpoints",
        "mid_run_min_age_turns": "An output is eligible mid-run once this many turns old",
        "mid_run_batch_chars": "A checkpoint needs at least this many eligible characters",
        "mid_run_batch_chars_openai": "The same, when `model` is `openai-codex/<id>` (that "
                                      "provider reads the whole context again after any edit)",
        "mid_run_chunk_keep_threshold": "`chunk_keep_threshold` for passes during a run",
        "mid_run_break_even": "A checkpoint must pay for the prompt-cache rewrite it causes",
        "small_result_min_chars": "Outputs from this size up to `min_result_chars` are judged "
                                  "whole; 0 turns this off",
        "small_keep_threshold": "Keep a small output if the judge's confidence it is needed is "
                                "at least this",
        "prune_exchanges": "Judge old exchanges and leave out the unrelated ones",
        "keep_recent_exchanges": "The last N exchanges before the current prompt are never "
                                 "judged",
        "exchange_omit_threshold": "Leave an old exchange out only if the judge's confidence it "
                                   "is still relevant is below this",
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
    "proxy": {
        "recovery_tools": "The proxy offers `search_history`, `read_context_output` and `recall` "
                          "itself and answers them: `auto` when the agent has no recovery tools, "
                          "`always`, or `never`",
        "recovery_rounds": "Follow-up requests the proxy sends at most for one agent request "
                           "while answering those calls",
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
