"""Session files of real shape at a heavy user's scale: the recorded sessions, multiplied.

Each generated file repeats the body of one recorded session until it reaches its target size,
under a fresh session id, so every line is a line an agent really wrote:

* Claude Code: every uuid of a copy is moved to a uuid of its own (the session id to the file's),
  and a copy's root hangs under the previous copy's last line, so the file stays one chain;
* Codex and Pi v1: history ids come from file positions, so the body lines are repeated as they
  are, after the template's own first line (``session_meta`` / the ``session`` header) with the
  new id.

Subagent files and Pi v3 sessions (ids of their own in every line) are not used as templates.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from pathlib import Path

try:
    from bench.recorded import agent_path
except ModuleNotFoundError:  # run as a file (python bench/x.py): bench/ itself is on the path
    from recorded import agent_path

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_UUID_FIELD = re.compile(r'"uuid":\s*"([0-9a-f-]{36})"')
_ROOT = re.compile(r'"parentUuid":\s*null')
_SESSION = "SESSION-ID-PLACEHOLDER"


def templates(fixtures: Path, sources: tuple[str, ...] = ("claude", "codex", "pi")
              ) -> list[tuple[str, Path, str]]:
    """(source, recorded file, its session id) for every usable recorded session."""
    found = []
    for path in sorted(fixtures.rglob("*.jsonl")):
        folder = path.parent.name
        first = json.loads(path.read_text(encoding="utf-8").split("\n", 1)[0])
        if folder == "claude-code" and "claude" in sources and "sidechain-file" not in path.name:
            text = path.read_text(encoding="utf-8")
            match = re.search(r'"sessionId":\s*"([0-9a-f-]{36})"', text)
            if match:
                found.append(("claude", path, match.group(1)))
        elif folder == "codex" and "codex" in sources and first.get("type") == "session_meta":
            found.append(("codex", path, first["payload"]["id"]))
        elif folder == "pi" and "pi" in sources and first.get("type") == "session" \
                and first.get("version") in (None, 1):
            found.append(("pi", path, first["id"]))
    return found


def _claude_copy(body: str, session: str, salt: int, previous: str | None) -> tuple[str, str]:
    """One copy of a Claude Code body with its uuids moved by ``salt``; (text, last uuid)."""
    moved = _UUID.sub(lambda m: f"{int(m.group()[:8], 16) ^ salt:08x}{m.group()[8:]}",
                      body.replace(session, _SESSION))
    if previous is not None:
        moved = _ROOT.sub(f'"parentUuid":"{previous}"', moved, count=1)
    last = _UUID_FIELD.findall(moved[-20000:]) or _UUID_FIELD.findall(moved)
    return moved, last[-1] if last else previous


def write_session(source: str, template: Path, session: str, target_bytes: int, out_root:
                  dict[str, Path], rng: random.Random) -> Path:
    """One multiplied session of ``template``: its copies up to the line that reaches
    ``target_bytes``."""
    new = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    text = template.read_text(encoding="utf-8")
    if not text.endswith("\n"):
        text += "\n"
    stem = f"{template.stem}-{new[:8]}"
    path = agent_path(out_root, template.with_name(f"{stem}.jsonl"))
    if source == "claude":
        path = path.with_name(f"{new}.jsonl")
        head, body = "", text
    else:
        head, body = text.split("\n", 1)
        head = head.replace(session, new) + "\n"
        if source == "pi":
            path = path.with_name(f"2026-01-01T00-00-00-000Z_{new}.jsonl")
        else:
            path = path.with_name(f"rollout-2026-01-01T00-00-00-{new}.jsonl")
    path.parent.mkdir(parents=True, exist_ok=True)
    written, previous = 0, None
    with open(path, "wb") as out:
        out.write(head.encode("utf-8"))
        written += len(head)
        while written < target_bytes:
            if source == "claude":
                piece, previous = _claude_copy(body, session, rng.getrandbits(31) | 1, previous)
                piece = piece.replace(_SESSION, new)
            else:
                piece = body
            data = piece.encode("utf-8")
            if written + len(data) > target_bytes:  # the last copy, cut after a line
                data = data[: data.index(b"\n", max(0, target_bytes - written - 1)) + 1]
            out.write(data)
            written += len(data)
    return path


def build(fixtures: Path, out_root: dict[str, Path], count: int, mean_bytes: int,
          sources: tuple[str, ...] = ("claude", "codex", "pi"), seed: int = 3) -> list[Path]:
    """``count`` sessions averaging about ``mean_bytes`` (sizes spread 0.2–1.8 × the mean),
    templates taken in turn."""
    rng = random.Random(seed)
    shapes = templates(fixtures, sources)
    if not shapes:
        raise SystemExit(f"no usable recorded sessions of {sources} in {fixtures}")
    files = []
    for n in range(count):
        source, template, session = shapes[n % len(shapes)]
        target = int(mean_bytes * rng.uniform(0.2, 1.8))
        files.append(write_session(source, template, session, target, out_root, rng))
    return files
