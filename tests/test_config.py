"""Settings: every ``[distill]`` key from config.toml, the environment and ``--set``, with the
precedence, origins and warnings of the other sections (docs/configuration.md).
"""

from __future__ import annotations

import logging
from dataclasses import asdict, fields

from context_paging.paging.distill import DistillConfig
from context_paging.server.cli import main
from context_paging.server.config import SCHEMA, load_settings
from context_paging.server.setup import clients

DISTILL_KEYS = [f.name for f in fields(DistillConfig)]


def home_with(tmp_path, text: str):
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(text)
    return home


def test_every_distill_config_field_is_a_setting_with_its_default(tmp_path):
    settings = load_settings(home=tmp_path / "fresh", environ={})
    assert list(SCHEMA["distill"]) == DISTILL_KEYS
    assert settings.values["distill"] == asdict(DistillConfig())
    assert settings.values["distill"]["model"] is None
    assert {settings.origins[f"distill.{key}"] for key in DISTILL_KEYS} == {"default"}
    assert settings.warnings == ()
    assert DistillConfig.from_mapping(settings.values["distill"]) == (DistillConfig(), [])


def test_config_file_values_are_used_and_remember_the_file(tmp_path):
    home = home_with(tmp_path, (
        "[distill]\ntimeout_ms = 2000\nconcurrency = 2.0\nkeep_whole_threshold = 1\n"
        'exclude_tools = ["bash", 3, "read"]\nmodel = "  openrouter/a/b  "\nmid_run = false\n'
    ))
    settings = load_settings(home=home, environ={})
    distill = settings.values["distill"]
    assert (distill["timeout_ms"], distill["concurrency"], distill["keep_whole_threshold"],
            distill["exclude_tools"], distill["model"], distill["mid_run"]) == (
        2000, 2, 1.0, ("bash", "read"), "openrouter/a/b", False)
    assert settings.origins["distill.timeout_ms"] == f"{home / 'config.toml'} [distill]"
    assert settings.warnings == ()


def test_the_environment_overrides_the_file(tmp_path):
    home = home_with(tmp_path, "[distill]\nconcurrency = 2\nmin_result_chars = 1000\n")
    settings = load_settings(home=home, environ={"CONTEXT_PAGING_DISTILL_CONCURRENCY": "12"})
    assert settings.values["distill"]["concurrency"] == 12
    assert settings.origins["distill.concurrency"] == (
        "environment CONTEXT_PAGING_DISTILL_CONCURRENCY")
    assert settings.values["distill"]["min_result_chars"] == 1000


def test_set_overrides_the_environment_and_the_file(tmp_path):
    home = home_with(tmp_path, "[distill]\nconcurrency = 2\n")
    settings = load_settings(
        home=home,
        environ={"CONTEXT_PAGING_DISTILL_CONCURRENCY": "12"},
        overrides={"distill.concurrency": 3},
    )
    assert settings.values["distill"]["concurrency"] == 3
    assert settings.origins["distill.concurrency"] == "flag --set distill.concurrency"


def test_an_invalid_value_falls_back_with_one_warning_naming_key_and_value(tmp_path, caplog):
    home = home_with(tmp_path, "[distill]\ntimeout_ms = 100\n")
    with caplog.at_level(logging.WARNING, logger="context_paging"):
        settings = load_settings(home=home, environ={})
    assert settings.values["distill"]["timeout_ms"] == 8_000
    assert settings.origins["distill.timeout_ms"] == "default"
    assert len(settings.warnings) == 1
    assert settings.warnings[0].startswith("distill.timeout_ms = 100 from ")
    assert "500 to 600000" in settings.warnings[0]
    assert [r.getMessage() for r in caplog.records] == list(settings.warnings)


def test_an_invalid_value_falls_back_to_the_next_valid_source(tmp_path):
    home = home_with(tmp_path, "[distill]\nconcurrency = 4\n")
    settings = load_settings(home=home, environ={"CONTEXT_PAGING_DISTILL_CONCURRENCY": "64"})
    assert settings.values["distill"]["concurrency"] == 4
    assert ["distill.concurrency = 64 from environment" in w for w in settings.warnings] == [True]


def test_upstream_case_58_invalid_values_all_give_the_defaults(tmp_path):
    home = home_with(tmp_path, (
        '[distill]\nenabled = "no"\nkeep_whole_threshold = 1.5\ntimeout_ms = 100\n'
        "concurrency = 64\nmax_segment_chars = 1000\nmax_chunks_per_segment = 1\n"
        'exclude_tools = "edit"\nhistory_exchanges = 2.5\nmodel = "/leading"\n'
    ))
    settings = load_settings(home=home, environ={})
    assert settings.values["distill"] == asdict(DistillConfig())
    assert len(settings.warnings) == 9


def test_unknown_distill_keys_sections_and_flags_are_warned_about(tmp_path):
    home = home_with(tmp_path, "[distill]\ntimeout = 5\n[distil]\nenabled = false\n")
    settings = load_settings(home=home, environ={}, overrides={"distill.bogus": 1})
    assert settings.warnings == (
        "config.toml: unknown setting [distill] timeout was ignored",
        "config.toml: unknown section [distil] was ignored",
        "flag --set distill.bogus: unknown setting was ignored",
    )


def test_exclude_tools_from_the_environment_is_a_json_list(tmp_path):
    settings = load_settings(home=tmp_path / "fresh", environ={
        "CONTEXT_PAGING_DISTILL_EXCLUDE_TOOLS": '["bash", null, "read"]',
        "CONTEXT_PAGING_DISTILL_MODEL": "anthropic/claude-haiku",
    })
    assert settings.values["distill"]["exclude_tools"] == ("bash", "read")
    assert settings.values["distill"]["model"] == "anthropic/claude-haiku"
    assert settings.warnings == ()


def test_exclude_tools_that_is_not_a_list_falls_back_to_the_default(tmp_path):
    settings = load_settings(home=tmp_path / "fresh",
                             environ={"CONTEXT_PAGING_DISTILL_EXCLUDE_TOOLS": "edit,write"})
    assert settings.values["distill"]["exclude_tools"] == ("edit", "write")
    assert ["'edit,write'" in w and "list of tool names" in w for w in settings.warnings] == [True]


def test_the_servers_distill_config_receives_the_configured_values(tmp_path):
    home = home_with(tmp_path, "[distill]\njudge = \"sampling\"\nconcurrency = 3\n")
    settings = load_settings(home=home, environ={"CONTEXT_PAGING_DISTILL_TIMEOUT_MS": "1500"},
                             overrides={"distill.exclude_tools": ["edit"]})
    config, warnings = DistillConfig.from_mapping(settings.values["distill"])
    assert warnings == []
    assert config == DistillConfig(judge="sampling", concurrency=3, timeout_ms=1_500,
                                   exclude_tools=("edit",))


def test_config_command_lists_every_distill_key_with_its_origin(tmp_path, capsys):
    home = home_with(tmp_path, "[distill]\nmin_run_chars = 9000\n")
    assert main(["--home", str(home), "--set", "distill.concurrency=2", "config"]) == 0
    out = capsys.readouterr().out
    rows = {line.split("  #")[0].strip(): line.split("# ", 1)[1]
            for line in out.splitlines() if "  # " in line}
    assert rows["distill.concurrency = 2"] == "flag --set distill.concurrency"
    assert rows["distill.min_run_chars = 9000"] == f"{home / 'config.toml'} [distill]"
    assert rows["distill.image_keep_turns = 3"] == "default"
    shown = {setting.split(" = ")[0] for setting in rows}
    assert {f"distill.{key}" for key in DISTILL_KEYS} <= shown
    assert len(rows) == sum(len(keys) for keys in clients.SCHEMA.values())
