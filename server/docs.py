"""The README's tool reference, generated from the tools' own schemas.

    python -m context_paging.server.docs          # print the reference (Markdown)
    python -m context_paging.server.docs --write  # replace the marked block in README.md

A test regenerates it from the committed ``tools/list`` snapshot and compares it with README.md,
so the documentation cannot drift from the contract.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

BEGIN = "<!-- tool-reference:begin -->"
END = "<!-- tool-reference:end -->"
ROOT = Path(__file__).resolve().parent.parent


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
                       ("maxLength", "max length "), ("minItems", "min items "),
                       ("maxItems", "max items ")):
        if key in inner:
            parts.append(f"{label}{inner[key]}")
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


def readme_with(reference_text: str, readme: str) -> str:
    head, _, rest = readme.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{reference_text}{END}{tail}"


def main() -> None:
    text = reference(snapshot_tools())
    if "--write" in sys.argv:
        path = ROOT / "README.md"
        path.write_text(readme_with(text, path.read_text(encoding="utf-8")), encoding="utf-8")
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
