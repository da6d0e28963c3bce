"""Settings: read once at start-up from the home's config.toml, the environment and flags.

Precedence, highest first: command-line flags, environment variables
(``CONTEXT_PAGING_<SECTION>_<KEY>``, e.g. ``CONTEXT_PAGING_PAGING_TOKEN_BUDGET``), the home's
``config.toml``, then the defaults (docs/configuration.md). An invalid value falls back to the next
source with one warning on stderr, as upstream does. Every resolved value remembers where it came
from, for ``context-paging config``.

``[distill]`` holds every :class:`~paging.distill.config.DistillConfig` field with its default,
and each source is checked by DistillConfig's own rule for that key, so the ranges live in one
place.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import partial
from pathlib import Path
from typing import Any

from context_paging.paging.distill.config import DistillConfig, check_setting
from context_paging.server.endpoints import DEFAULT_HOME, ENV_HOME

log = logging.getLogger("context_paging")

MAX_SAFE_INTEGER = 2**53 - 1


def _positive_int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SAFE_INTEGER:
        raise ValueError(f"must be a whole number from 1 to {MAX_SAFE_INTEGER:,}")
    return value


def _optional_positive_int(value: Any) -> int | None:
    return None if value is None else _positive_int(value)


def _fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ValueError("must be a number above 0 and at most 1")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _choice(*options: str) -> Callable[[Any], str]:
    def check(value: Any) -> str:
        if value not in options:
            raise ValueError("must be one of " + ", ".join(repr(o) for o in options))
        return value

    return check


def _directory(value: Any) -> Path:
    if not isinstance(value, str) or not value.strip() or "\x00" in value:
        raise ValueError("must be a directory path")
    return Path(os.path.expanduser(value))


# section -> key -> (default, validator)
SCHEMA: dict[str, dict[str, tuple[Any, Callable[[Any], Any]]]] = {
    "paging": {
        "enabled": (True, _boolean),
        "token_budget": (128_000, _positive_int),
        "trim_to_tokens": (None, _optional_positive_int),
        "first_cut": (1.0, _fraction),  # index.window.pipeline.ContextSettings.first_cut
        "estimator": ("tiktoken", _choice("tiktoken", "chars4")),
        # The largest request line serve reads (select_context carries whole conversations);
        # a larger one is answered REQUEST_TOO_LARGE without being parsed (server/mcp/transport.py).
        "max_request_bytes": (32 * 1024 * 1024, _positive_int),
    },
    "distill": {
        f.name: (f.default, partial(check_setting, f.name)) for f in fields(DistillConfig)
    },
    "server": {
        # "recovery" lists only the model-facing recovery tools (chat clients never call
        # select_context, and every listed definition costs the model tokens on each request).
        "tools": ("all", _choice("all", "recovery")),
        # select_context's text copy of its reply: "json", the whole reply (the MCP spec asks a
        # tool with structured content for its serialized JSON), or "summary", the reply
        # without the window's messages (a host that reads structuredContent, as every agent
        # host does, saves sending, dumping and parsing the window twice: 8-18 ms a call over
        # stdio on the benchmark workload, bench/stdio_trace.py).
        "select_context_text": ("json", _choice("json", "summary")),
    },
    "proxy": {
        # The recovery tools the proxy offers the model itself and answers in band
        # (server/proxy/inband.py): "auto" when the agent has none, "always", or "never".
        "recovery_tools": ("auto", _choice("auto", "always", "never")),
        # Follow-up requests the proxy may send for one agent request while answering them.
        "recovery_rounds": (3, _positive_int),
    },
    "ledger": {
        # Ledger sessions not written for this many days are deleted when a server or proxy
        # starts, and by ``context-paging forget --expired`` (unset: kept until forgotten).
        "keep_days": (None, _optional_positive_int),
    },
    "sources": {
        "pi": ("~/.pi/agent/sessions", _directory),
        "claude_code": ("~/.claude/projects", _directory),
        "codex": ("~/.codex/sessions", _directory),
        "gemini": ("~/.gemini/tmp", _directory),
        "opencode": ("~/.local/share/opencode", _directory),
    },
}


@dataclass(frozen=True)
class Settings:
    home: Path
    values: dict[str, dict[str, Any]]
    origins: dict[str, str] = field(default_factory=dict)  # "section.key" -> where it came from
    warnings: tuple[str, ...] = ()

    def get(self, section: str, key: str) -> Any:
        return self.values[section][key]

    @property
    def roots(self) -> dict[str, Path]:
        """Session roots keyed by source name as used in session references."""
        sources = self.values["sources"]
        return {"pi": sources["pi"], "claude": sources["claude_code"], "codex": sources["codex"],
                "gemini": sources["gemini"], "opencode": sources["opencode"]}

    @property
    def paging_enabled(self) -> bool:
        return bool(self.values["paging"]["enabled"])


def _parse_env(raw: str) -> Any:
    """Environment and flag values are TOML values when they parse as one, else a JSON list or
    table (``["bash", null]`` is JSON but not TOML), else plain strings."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    if raw.lstrip().startswith(("[", "{")):
        try:
            return json.loads(raw)
        except ValueError:
            pass
    return raw


def load_settings(
    home: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Settings:
    """Resolve settings. ``overrides`` maps ``"section.key"`` to values given as flags."""
    environ = os.environ if environ is None else environ
    overrides = overrides or {}
    home_path = Path(os.path.expanduser(str(home or environ.get(ENV_HOME) or DEFAULT_HOME)))
    warnings: list[str] = []
    file_values = _read_config(home_path / "config.toml", warnings)
    values: dict[str, dict[str, Any]] = {}
    origins: dict[str, str] = {}
    for section, keys in SCHEMA.items():
        values[section] = {}
        section_file = file_values.get(section, {})
        if not isinstance(section_file, dict):
            warnings.append(f"config.toml: [{section}] must be a table; it was ignored")
            section_file = {}
        for key, (default, check) in keys.items():
            env_name = f"CONTEXT_PAGING_{section}_{key}".upper()
            layers = [
                (f"flag --set {section}.{key}", overrides.get(f"{section}.{key}", _MISSING)),
                (f"environment {env_name}", _env(environ, env_name)),
                (f"{home_path / 'config.toml'} [{section}]", section_file.get(key, _MISSING)),
            ]
            values[section][key], origins[f"{section}.{key}"] = _first_valid(
                layers, default, check, f"{section}.{key}", warnings
            )
        for unknown in sorted(set(section_file) - set(keys)):
            warnings.append(f"config.toml: unknown setting [{section}] {unknown} was ignored")
    for unknown in sorted(set(file_values) - set(SCHEMA)):
        warnings.append(f"config.toml: unknown section [{unknown}] was ignored")
    for unknown in sorted(set(overrides) - set(origins)):
        warnings.append(f"flag --set {unknown}: unknown setting was ignored")
    for message in warnings:
        log.warning("%s", message)
    return Settings(home_path, values, origins, tuple(warnings))


_MISSING = object()


def _env(environ: Mapping[str, str], name: str) -> Any:
    return _parse_env(environ[name]) if name in environ else _MISSING


def _first_valid(
    layers: list[tuple[str, Any]],
    default: Any,
    check: Callable[[Any], Any],
    name: str,
    warnings: list[str],
) -> tuple[Any, str]:
    for origin, raw in layers:
        if raw is _MISSING:
            continue
        try:
            return check(raw), origin
        except ValueError as exc:
            warnings.append(f"{name} = {raw!r} from {origin} {exc}; using the next source")
    return (check(default) if default is not None else None), "default"


def _read_config(path: Path, warnings: list[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        warnings.append(f"{path} could not be read ({exc}); using defaults")
        return {}
