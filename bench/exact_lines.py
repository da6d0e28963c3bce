"""Exact lines pasted from old outputs, searched across every session: recall@3 and shown lines.

    python bench/exact_lines.py [--fixtures DIR] [--per-session N] [--show-misses]

Every recorded session of all three agents is laid out under one home (bench/search_eval.py's
layout). From every tool output the bench takes lines a person might paste to ask "what was that
error?": 20-150 characters, at least three words, no double quote. An output that is one JSON
object holding its text under ``output``, ``stdout``, ``stderr`` or ``content`` gives the lines of
that text, as the person saw it (decoded here, so every checkout is asked the same lines). A
line is kept only when it occurs (case-insensitively) in exactly one item among all sessions (its
message and the outputs as seen), so the truth is that item. At most ``--per-session`` lines
per session, evenly spaced.

Each line is searched as a phrase (in double quotes; ``--unquoted``: as typed) with
``scope="all"`` and no session, limit 3, through ``History.search``. Printed: recall@3 (the
owning item among the three), and the share of found owners whose reply shows the matched line
(a ``matches`` entry holding it).
The same file runs against an older checkout for the "before" figure (``PYTHONPATH=<checkout>``);
a reply without ``matches`` shows no line.

``--exec-json`` first rewrites every Codex tool output as the exec tool of Codex's default model
records it, ``{"chunk_id", "wall_time", "exit_code", "original_token_count", "output"}`` with the
text JSON-escaped inside (0.40's ``{"output", "metadata"}`` unwrapped first): the same lines,
stored as that agent stores them.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

try:
    from bench.recorded import require, sessions_folder
    from bench.search_eval import lay_out
except ModuleNotFoundError:  # run as a file (python bench/x.py): bench/ itself is on the path
    from recorded import require, sessions_folder
    from search_eval import lay_out

_WORD = re.compile(r"[A-Za-z0-9_]+")


def seen_text(output: str) -> str:
    """The text a person saw of an output: a JSON object's output/stdout/stderr/content
    strings, decoded; any other output as it is."""
    stripped = output.strip()
    if not (stripped.startswith("{") and stripped.endswith("}")):
        return output
    try:
        value = json.loads(stripped, strict=False)
    except ValueError:
        return output
    if not isinstance(value, dict):
        return output
    texts = [value[k] for k in ("output", "stdout", "stderr", "content")
             if isinstance(value.get(k), str)]
    return "\n".join(texts) if texts else output


def as_exec_json(root: Path) -> None:
    """Every Codex function output under ``root`` rewritten as exec-tool JSON in text."""
    for path in root.rglob("*.jsonl"):
        lines = []
        for raw in path.read_text(encoding="utf-8").splitlines():
            try:
                value = json.loads(raw)
            except ValueError:
                lines.append(raw)
                continue
            payload = value.get("payload") if isinstance(value, dict) else None
            if isinstance(payload, dict) and payload.get("type") == "function_call_output" \
                    and isinstance(payload.get("output"), str):
                text, code = payload["output"], 0
                if text.startswith('{"output"'):
                    inner = json.loads(text)
                    text = inner["output"]
                    code = (inner.get("metadata") or {}).get("exit_code", 0)
                payload["output"] = json.dumps({
                    "chunk_id": "c0ffee", "wall_time": 0.1, "exit_code": code,
                    "original_token_count": len(text) // 4, "output": text})
                raw = json.dumps(value, ensure_ascii=False)
            lines.append(raw)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def candidate_lines(output: str) -> list[str]:
    lines = []
    for line in seen_text(output).splitlines():
        line = line.strip()
        if 20 <= len(line) <= 150 and '"' not in line and len(_WORD.findall(line)) >= 3:
            lines.append(line)
    return lines


def mine(history, refs: list[str], per_session: int) -> list[tuple[str, str, str]]:
    """(line, session, history_id): each line in exactly one item (its message and its outputs
    as seen: the same text whatever the checkout)."""
    from context_paging.index.history import content_text

    texts = []  # (session, history_id, lowered text)
    owners: dict[str, list[tuple[str, str]]] = {}
    for ref in refs:
        for item in history.navigator(ref).visible:
            seen = [content_text(item.message.content)]
            seen += [seen_text(content_text(r.content)) for r in item.tool_results]
            texts.append((ref, item.history_id, "\n".join(seen).lower()))
            if item.kind != "model_turn":
                continue
            for result in item.tool_results:
                for line in candidate_lines(content_text(result.content)):
                    owners.setdefault(line, []).append((ref, item.history_id))
    picked: dict[str, list[tuple[str, str, str]]] = {}
    for line, places in owners.items():
        if len(set(places)) != 1:
            continue
        lowered = line.lower()
        holders = {(s, h) for s, h, text in texts if lowered in text}
        if holders == {places[0]}:
            picked.setdefault(places[0][0], []).append((line, *places[0]))
    result = []
    for ref in refs:
        lines = picked.get(ref, [])
        if len(lines) > per_session:
            step = len(lines) / per_session
            lines = [lines[int(i * step)] for i in range(per_session)]
        result.extend(lines)
    return result


def shows(reference: dict, line: str) -> bool:
    """Whether a reference's matches hold ``line`` (marks removed, clipping allowed)."""
    for match in reference.get("matches") or ():
        shown = match.get("text", "").replace("«", "").replace("»", "").strip("… ")
        if shown and (shown in line or line in shown):
            return True
    return False


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fixtures", type=Path, default=sessions_folder())
    parser.add_argument("--per-session", type=int, default=5)
    parser.add_argument("--unquoted", action="store_true",
                        help="search each line as typed, without the double quotes")
    parser.add_argument("--show-misses", action="store_true")
    parser.add_argument("--exec-json", action="store_true",
                        help="store Codex outputs as the exec tool's JSON in text first")
    args = parser.parse_args()
    fixtures = require(args.fixtures)
    from context_paging.index.discovery import iter_session_files
    from context_paging.index.service import History

    tmp = Path(tempfile.mkdtemp(prefix="exact-lines-"))
    try:
        roots = lay_out(tmp, fixtures)
        if args.exec_json:
            as_exec_json(roots["codex"])
        history = History(roots, tmp / "home")
        refs = [found.ref for found in iter_session_files(roots)]
        queries = mine(history, refs, args.per_session)
        history.index_all()
        found = shown = 0
        misses = []
        started = time.perf_counter()
        for line, session, history_id in queries:
            query = line[:198] if args.unquoted else f'"{line[:196]}"'
            reply = history.search(query, None, "all", limit=3)
            owner = [r for r in reply.references if (r["session"], r["history_id"]) ==
                     (session, history_id)]
            found += bool(owner)
            shown += bool(owner) and shows(owner[0], line)
            if not owner:
                misses.append((session, line))
        elapsed = time.perf_counter() - started
        history.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    n = len(queries)
    form = ("as typed" if args.unquoted else "in double quotes") + \
        (", Codex outputs as exec JSON" if args.exec_json else "")
    print(f"{n} lines from {len(refs)} sessions, searched {form} with scope 'all' and no "
          "session")
    print(f"recall@3          {found}/{n} = {100 * found / max(n, 1):.1f}%")
    print(f"line shown        {shown}/{found} = {100 * shown / max(found, 1):.1f}% of found")
    print(f"({elapsed:.1f} s for the searches)", file=sys.stderr)
    if args.show_misses:
        for session, line in misses:
            print(f"MISS {session}: {line!r}", file=sys.stderr)


if __name__ == "__main__":
    main()
