"""The CLI's help in groups, and docs/cli.md's reference made from the same argparse tree.

``python -m context_paging.server.commands.docs --write`` writes the reference into docs/cli.md.
``context-paging --help`` lists the commands by group instead of argparse's one flat list, and
every command's own help opens with its description line. A test regenerates the marked block
of docs/cli.md and compares, so the page cannot drift from the parser.
"""

from __future__ import annotations

import argparse
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "cli.md"
BEGIN = "<!-- cli-reference:begin (python -m context_paging.server.commands.docs --write) -->"
END = "<!-- cli-reference:end -->"

# Commands in the order a person meets them. A command missing here is listed under "other
# commands" rather than hidden, so a new one is never left out of --help.
GROUPS = {
    "everyday": ("demo", "sessions", "search", "browse", "show", "output", "recall", "stats",
                 "replay"),
    "agents and proxy": ("run", "proxy", "view", "statusline", "install-proxy",
                         "uninstall-proxy", "doctor"),
    "host and diagnostics": ("serve", "install-config", "uninstall-config", "index", "config",
                             "forget"),
}
OTHER = "other commands"


def subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def grouped(commands: argparse._SubParsersAction) -> dict[str, list[tuple[str, str]]]:
    """Group name → [(command, one-line help)], every registered command exactly once."""
    helps = {a.dest: a.help or "" for a in commands._choices_actions}
    out: dict[str, list[tuple[str, str]]] = {}
    placed: set[str] = set()
    for group, names in GROUPS.items():
        out[group] = [(n, helps[n]) for n in names if n in helps]
        placed |= set(names)
    rest = [(n, h) for n, h in helps.items() if n not in placed]
    if rest:
        out[OTHER] = rest
    return {group: rows for group, rows in out.items() if rows}


def describe(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give every command without one a description line: its one-line help as a sentence."""
    commands = subcommands(parser)
    for action in commands._choices_actions:
        command = commands.choices[action.dest]
        if command.description is None and action.help:
            command.description = action.help[0].upper() + action.help[1:] + "."
    return parser


def finish(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Describe every command and list the commands by group in --help."""
    commands = subcommands(describe(parser))
    width = max(len(name) for name in commands.choices) + 2
    lines = []
    for group, rows in grouped(commands).items():
        lines.append(f"{group}:")
        lines += [textwrap.fill(text, 79, initial_indent=f"  {name:<{width}}",
                                subsequent_indent=" " * (width + 2)) for name, text in rows]
        lines.append("")
    lines.append("Run `context-paging COMMAND --help` for a command's options; docs/cli.md "
                 "lists them all.")
    parser.epilog = "\n".join(lines)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    commands.help = "one of the commands below"
    commands._choices_actions.clear()  # the flat list; the epilog holds the grouped one
    return parser


# --- docs/cli.md ----------------------------------------------------------------------------


def _flags(action: argparse.Action) -> str:
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    value = ""
    if action.nargs != 0:
        value = " " + str(action.metavar or action.dest.upper())
        if action.choices is not None and action.metavar is None:
            value = " {" + ",".join(str(c) for c in action.choices) + "}"
    return ", ".join(f"`{flag}{value}`" for flag in action.option_strings)


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| option | meaning |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        meaning = (action.help or "").replace("|", "\\|").replace("%%", "%")
        if action.required and action.option_strings:
            meaning += " (required)"
        rows.append(f"| {_flags(action)} | {meaning} |")
    return rows if len(rows) > 2 else ["No options besides `--help`."]


def reference(parser: argparse.ArgumentParser) -> str:
    """The generated part of docs/cli.md, from a parser built with ``grouped_help=False`` (the
    flat list of commands intact): the options before the command, then each group."""
    commands = subcommands(parser)
    out = ["## Options before the command", "", *_options(_top_level(parser)), ""]
    for group, rows in grouped(commands).items():
        out += [f"## {group[0].upper() + group[1:]}", ""]
        out += [f"- [`{name}`](#{name}): {text}" for name, text in rows]
        out.append("")
        for name, _ in rows:
            command = commands.choices[name]
            out += [f"### {name}", "", "```", _usage(command), "```", "",
                    command.description or "", "", *_options(command), ""]
    return "\n".join(out).rstrip() + "\n"


def page_with(reference_text: str, page: str) -> str:
    """``page`` with its generated block replaced (the text around it is written by hand)."""
    head, _, rest = page.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{reference_text}{END}{tail}"


def block_of(page: str) -> str:
    return page.split(BEGIN, 1)[1].split(END, 1)[0].removeprefix("\n")


def _usage(parser: argparse.ArgumentParser) -> str:
    """The usage line at a fixed width (argparse otherwise follows the terminal's)."""
    formatter = argparse.HelpFormatter(parser.prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _top_level(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(add_help=False)
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            top._add_action(action)
    return top
