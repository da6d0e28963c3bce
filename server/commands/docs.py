"""The generated reference pages: the tools, the settings and the command line.

    python -m context_paging.server.commands.docs          # print the references (Markdown)
    python -m context_paging.server.commands.docs --write  # replace the marked blocks in docs/

The tool reference (docs/tools.md) is made from the committed ``tools/list`` snapshot, the
settings reference (docs/configuration.md) from ``server/config.py``'s ``SCHEMA``, the command
reference (docs/cli.md) from the CLI's argparse tree (server/commands/help.py); tests
regenerate each and compare it with its page, so the documentation cannot drift from the code.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

BEGIN = "<!-- tool-reference:begin -->"
END = "<!-- tool-reference:end -->"
CONFIG_BEGIN = "<!-- config-reference:begin -->"
CONFIG_END = "<!-- config-reference:end -->"
ROOT = Path(__file__).resolve().parents[2]
TOOLS_PAGE = ROOT / "docs" / "tools.md"
CONFIG_PAGE = ROOT / "docs" / "configuration.md"
# The recovery tools the proxy offers in band (server/proxy/inband.py), made from the same
# snapshot: the tools a model calls to page history back, scoped to the proxied conversation.
OFFERED_FILE = ROOT / "server" / "data" / "recovery-tools.json"
OFFERED = ("search_history", "read_context_output", "recall")
# Follow-ups a description names that are not offered in band, and what it names instead.
NOT_OFFERED = {"follow up with recall, load_history or browse_history":
               "follow up with recall or read_context_output"}


def _type(schema: dict[str, Any]) -> str:
    if "anyOf" in schema:
        kinds = [_type(s) for s in schema["anyOf"] if s.get("type") != "null"]
        return " \\| ".join(kinds) + "?"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if schema.get("type") == "array":
        return f"{_type(schema.get('items', {}))}[]"
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    return str(schema.get("type", "any"))


def _limits(schema: dict[str, Any]) -> str:
    inner = schema
    if "anyOf" in schema:
        inner = next((s for s in schema["anyOf"] if s.get("type") != "null"), {})
    parts = []
    for key, label in (("minimum", "≥"), ("maximum", "≤"), ("minLength", "min length "),
                       ("maxLength", "max length ")):
        if key in inner:
            parts.append(f"{label}{inner[key]}")
    low, high = inner.get("minItems"), inner.get("maxItems")
    if low is not None and high is not None:
        parts.append(f"{low}–{high} entries")
    elif low is not None or high is not None:
        parts.append(f"at least {low} entries" if high is None else f"at most {high} entries")
    if "items" in inner and "maxLength" in inner["items"]:
        parts.append(f"each max length {inner['items']['maxLength']}")
    return ", ".join(parts)


def reference(tools: list[dict[str, Any]]) -> str:
    out = []
    for tool in tools:
        hints = tool.get("annotations", {})
        kind = "read-only" if hints.get("readOnlyHint") else "writes the ledger"
        out += [f"### `{tool['name']}` — {tool.get('title', '')} ({kind})", "",
                tool.get("description", ""), "",
                "| argument | type | default | limits | meaning |", "|---|---|---|---|---|"]
        schema = tool["inputSchema"]
        required = set(schema.get("required", []))
        for name, prop in schema.get("properties", {}).items():
            default = "required" if name in required else f"`{json.dumps(prop.get('default'))}`"
            meaning = prop.get("description", "").replace("|", "\\|")
            out.append(f"| `{name}` | {_type(prop)} | {default} | {_limits(prop)} | {meaning} |")
        returns = ", ".join(f"`{k}`" for k in tool.get("outputSchema", {}).get("properties", {}))
        out += ["", f"Returns: {returns}.", ""]
    return "\n".join(out).rstrip() + "\n"


def snapshot_tools() -> list[dict[str, Any]]:
    return json.loads((ROOT / "tests" / "snapshots" / "tools.json").read_text(encoding="utf-8"))


def offered_tools(tools: list[dict[str, Any]]) -> str:
    """The in-band tools' definitions file: name, description and input schema of each offered
    tool, without its ``session`` argument (the proxy scopes the call to the conversation), and
    naming no tool that is not offered."""
    out = []
    for tool in tools:
        if tool["name"] not in OFFERED:
            continue
        schema = dict(tool["inputSchema"])
        schema["properties"] = {k: v for k, v in schema.get("properties", {}).items()
                                if k != "session"}
        text = tool.get("description", "")
        for named, offered in NOT_OFFERED.items():  # name only tools the model is given
            text = text.replace(named, offered)
        out.append({"name": tool["name"], "description": text, "input_schema": schema})
    return json.dumps(out, indent=1, ensure_ascii=False) + "\n"


def _rule(check: Callable[[Any], Any]) -> str:
    """The rule a setting's validator holds, in its own words (what it says of a bad value)."""
    try:
        check(object())
    except (ValueError, TypeError) as exc:
        text = str(exc).removeprefix("must be ")
        return re.sub(r"\d+(?:\.\d+)?e\+\d+", lambda m: f"{float(m[0]):,.0f}", text)
    return "any value"


def _default(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, tuple):
        value = list(value)
    return f"`{json.dumps(value)}`"


def config_reference() -> str:
    """One table per section of the settings, made from ``SCHEMA`` and ``MEANINGS``."""
    from context_paging.server.config import SCHEMA
    from context_paging.server.settings_help import MEANINGS

    out = []
    for section, keys in SCHEMA.items():
        out += [f"### `[{section}]`", "", "| key | default | accepts | meaning |",
                "|---|---|---|---|"]
        for key, (default, check) in keys.items():
            meaning = MEANINGS[section][key].replace("|", "\\|")
            rule = _rule(check).replace("|", "\\|")
            out.append(f"| `{key}` | {_default(default)} | {rule} | {meaning} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


def block_of(page: str, begin: str, end: str) -> str:
    """The text between a page's markers (what the generator owns)."""
    return page.split(begin, 1)[1].split(end, 1)[0]


def page_with(text: str, page: str, begin: str = BEGIN, end: str = END) -> str:
    head, _, rest = page.partition(begin)
    _, _, tail = rest.partition(end)
    return f"{head}{begin}\n{text}{end}{tail}"


def main() -> None:
    from context_paging.server.cli import build_parser
    from context_paging.server.commands import help as cli_help

    cli = cli_help.reference(build_parser(grouped_help=False))
    blocks = ((TOOLS_PAGE, BEGIN, END, reference(snapshot_tools())),
              (CONFIG_PAGE, CONFIG_BEGIN, CONFIG_END, config_reference()),
              (cli_help.PAGE, cli_help.BEGIN, cli_help.END, cli))
    if "--write" in sys.argv:
        OFFERED_FILE.write_text(offered_tools(snapshot_tools()), encoding="utf-8")
    for path, begin, end, text in blocks:
        if "--write" in sys.argv:
            page = path.read_text(encoding="utf-8")
            path.write_text(page_with(text, page, begin, end), encoding="utf-8")
        else:
            sys.stdout.write(text)


if __name__ == "__main__":
    main()
