"""The CLI's help: every option described, commands in groups, docs/cli.md current."""

from __future__ import annotations

import argparse

from context_paging.server.cli import build_parser
from context_paging.server.commands import help as cli_help

from tests.conftest import PROJECT


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return dict(cli_help.subcommands(parser).choices)


def test_every_option_and_argument_of_every_command_has_help_text():
    parser = build_parser()
    missing = []
    for name, command in {"context-paging": parser, **_commands(parser)}.items():
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                continue
            if not (action.help or "").strip():
                missing.append(f"{name} {'/'.join(action.option_strings) or action.dest}")
    assert missing == []


def test_every_command_has_a_description_line_in_its_own_help():
    for name, command in _commands(build_parser()).items():
        assert command.description and command.description.endswith("."), name
        shown = " ".join(command.format_help().split())
        assert " ".join(command.description.split()) in shown, name


def test_the_main_help_lists_every_command_once_under_its_group():
    parser = build_parser()
    text = parser.format_help()
    epilog = text[text.index("everyday:"):]
    groups = cli_help.grouped(cli_help.subcommands(build_parser(grouped_help=False)))
    assert list(groups)[:3] == ["everyday", "agents and proxy", "host and diagnostics"]
    for group in groups:
        assert f"\n{group}:\n" in "\n" + epilog, group
    listed = [line.split()[0] for line in epilog.splitlines()
              if line.startswith("  ") and not line.startswith("   ")]
    assert sorted(listed) == sorted(_commands(parser))
    assert text.index("everyday:") < text.index("agents and proxy:") < text.index(
        "host and diagnostics:")


def test_a_command_not_in_any_group_is_listed_under_other_commands():
    parser = build_parser(grouped_help=False)
    commands = cli_help.subcommands(parser)
    commands.add_parser("brand-new", help="a command no group names yet")
    groups = cli_help.grouped(commands)
    assert groups[cli_help.OTHER] == [("brand-new", "a command no group names yet")]


def test_the_cli_reference_page_matches_the_parser():
    page = (PROJECT / "docs" / "cli.md").read_text(encoding="utf-8")
    hint = "run: python -m context_paging.server.commands.docs --write"
    assert cli_help.block_of(page) == cli_help.reference(build_parser(grouped_help=False)), hint


def test_the_cli_reference_documents_every_option_of_every_command():
    page = cli_help.reference(build_parser(grouped_help=False))
    for name, command in _commands(build_parser()).items():
        assert f"\n### {name}\n" in page, name
        section = page.split(f"\n### {name}\n", 1)[1].split("\n### ", 1)[0]
        for action in command._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in section, (name, flag)


# Words a person reading --help or the settings reference has no way to know: the project's
# internals, the project it follows, the ranking's name, the judge's probabilities.
INSIDER = ("frontier", "upstream", "BM25", "P(", "P is", "the roots", "cl100k", "FIFO",
           "Master switch", "strategy", "baseline's", "weighed with")


def _help_texts() -> dict[str, str]:
    from context_paging.server.settings_help import MEANINGS

    parser = build_parser(grouped_help=False)
    texts = {"context-paging": parser.description or ""}
    for name, command in {"context-paging": parser, **_commands(parser)}.items():
        texts[f"{name} (description)"] = command.description or ""
        for action in command._actions:
            if action.help and action.help != argparse.SUPPRESS:
                texts[f"{name} {'/'.join(action.option_strings) or action.dest}"] = action.help
    for section, keys in MEANINGS.items():
        texts.update({f"[{section}] {key}": meaning for key, meaning in keys.items()})
    return texts


def test_help_and_setting_descriptions_use_plain_words():
    found = {where: word for where, text in _help_texts().items() for word in INSIDER
             if word.lower() in text.lower()}
    assert found == {}
