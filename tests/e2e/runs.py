"""One run of one agent on the scripted task: directly against the fake provider, through
``context-paging run -- <agent>``, or through ``install-proxy --write`` and a ``context-paging
proxy`` the run starts. Waits are bounded (a process timeout, a read of the proxy's start-up
line); nothing sleeps.
"""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from context_paging.server.setup import clients

from tests.e2e import agents, task
from tests.e2e.provider import ScriptedProvider
from tests.fake_provider import Served

RUN_TIMEOUT = 240.0  # one agent run of 18 steps; a hang fails the test, it never waits longer
START_TIMEOUT = 60.0
# the installed console script, as a user runs it (the same lookup install-proxy writes)
CLI = [clients.server_command()[0], *clients.server_command()[1]]


@dataclass
class Run:
    agent: agents.Agent
    route: str  # direct | run | install
    provider: ScriptedProvider
    returncode: int
    stdout: str
    stderr: str
    home: Path
    data: Path
    work: Path
    # the live view's conversations, read over HTTP from the running proxy (install route)
    view: list[dict] | None = None

    @property
    def transcript(self) -> str:
        tail = lambda text: text[-3000:]  # noqa: E731
        return (f"{self.agent.label} via {self.route}: exit {self.returncode}\n"
                f"--- stdout (tail)\n{tail(self.stdout)}\n--- stderr (tail)\n{tail(self.stderr)}")


def prepare(root: Path, agent: agents.Agent) -> tuple[Path, Path, Path]:
    home, data, work = root / "home", root / "data", root / "work"
    for folder in (home, data, work):
        folder.mkdir(parents=True)
    task.write_files(work)
    agents.quiet_settings(home)
    (data / "config.toml").write_text(f"[paging]\ntoken_budget = {agent.budget}\n")
    return home, data, work


def run_agent(agent: agents.Agent, route: str, root: Path, recover: bool = False) -> Run:
    """``recover``: the scripted model calls the offered recovery tool once it is paged."""
    home, data, work = prepare(root, agent)
    provider = ScriptedProvider(recover=recover)
    env = agents.base_environment(home, data)
    with Served(provider) as fake:
        if route == "direct":
            argv = agents.with_extra(agent.argv(), agents.point_directly(agent, home,
                                                                        fake.url, env))
            done = _call(argv, env, work)
        elif route == "run":
            if agent.name == "pi":  # where Pi goes unless the run re-points it: a second fake
                trap = ScriptedProvider()
                with Served(trap) as bypass:
                    agents.write_pi_models(home, bypass.url)
                    done = _call(_through_run(agent, fake.url), env, work)
                provider.bypassed = len(trap.exchanges)
            else:
                done = _call(_through_run(agent, fake.url), env, work)
        else:
            view: list[dict] = []
            done = _through_install(agent, fake.url, env, home, work, view)
            return Run(agent, route, provider, done.returncode, done.stdout, done.stderr,
                       home, data, work, view)
    return Run(agent, route, provider, done.returncode, done.stdout, done.stderr,
               home, data, work)


def _call(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    try:
        # OpenCode takes its working folder from PWD, which a shell would have set
        return subprocess.run(argv, env={**env, "PWD": str(cwd)}, cwd=cwd,
                              capture_output=True, text=True,
                              timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(argv, -9, _text(exc.stdout), _text(exc.stderr)
                                           + f"\n(killed after {RUN_TIMEOUT:.0f} s)")


def _text(value: bytes | str | None) -> str:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    return value or ""


def _through_run(agent: agents.Agent, url: str) -> list[str]:
    return [*CLI, "run", "--upstream-anthropic", url, "--upstream-openai", url,
            "--upstream-gemini", url, "--", *agent.argv()]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


INSTALL_CLIENT = {"claude": "claude-code", "codex": "codex", "pi": "pi", "gemini": "gemini",
                  "opencode": "opencode"}


def _through_install(agent: agents.Agent, url: str, env: dict[str, str], home: Path,
                     work: Path, view: list[dict]) -> subprocess.CompletedProcess:
    port = free_port()
    installed = subprocess.run([*CLI, "install-proxy", "--client", INSTALL_CLIENT[agent.name],
                                "--port", str(port), "--write"], env=env, capture_output=True,
                               text=True, timeout=START_TIMEOUT, cwd=work)
    if installed.returncode != 0:
        return installed
    proxy = subprocess.Popen([*CLI, "proxy", "--port", str(port), "--upstream-anthropic", url,
                              "--upstream-openai", url, "--upstream-gemini", url], env=env,
                             cwd=work,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    lines, pump = _lines(proxy)
    try:
        started = _wait_for(lines, "context-paging proxy on", START_TIMEOUT)
        named = _wait_for(lines, "live view at", START_TIMEOUT) if started else None
        if started is None:
            proxy.kill()
            return subprocess.CompletedProcess([], -1, "", "the proxy did not start: "
                                               + "".join(_drain(lines)))
        done = _call(agent.argv(), env, work)
        view += _view(named or "", port)
        return subprocess.CompletedProcess(done.args, done.returncode, done.stdout,
                                           done.stderr + "\n--- proxy stderr\n"
                                           + "".join(_drain(lines)))
    finally:
        proxy.terminate()
        try:
            proxy.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait(timeout=30)
        pump.join(timeout=30)  # the pipe ends with the process
        proxy.stderr.close()


def _view(started: str, port: int) -> list[dict]:
    """The live view's conversations, from the URL the proxy's start line names (its token
    included), as the page reads them."""
    import httpx2 as httpx

    found = re.search(r"live view at (http://\S+)", started)
    url = found.group(1) if found else ""
    if not url.startswith(f"http://127.0.0.1:{port}/context-paging/?token="):
        return []
    api = url.replace("/context-paging/?", "/context-paging/api/conversations?")
    reply = httpx.get(api, timeout=START_TIMEOUT, headers={"sec-fetch-site": "same-origin"})
    return reply.json()["conversations"] if reply.status_code == 200 else []


def _lines(process: subprocess.Popen) -> tuple[queue.Queue, threading.Thread]:
    """The process's stderr lines as they come (None at the end), read on a thread."""
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in process.stderr:
            lines.put(line)
        lines.put(None)

    thread = threading.Thread(target=pump, daemon=True)
    thread.start()
    return lines, thread


def _wait_for(lines: queue.Queue, needle: str, timeout: float) -> str | None:
    seen = []
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            return None
        if line is None:
            for old in seen:
                lines.put(old)
            return None
        seen.append(line)
        if needle in line:
            return line


def _drain(lines: queue.Queue) -> list[str]:
    out = []
    while True:
        try:
            line = lines.get_nowait()
        except queue.Empty:
            return out
        if line is not None:
            out.append(line)


def search_cli(run: Run, query: str) -> subprocess.CompletedProcess:
    """``context-paging search QUERY`` with no session, from the run's work folder."""
    env = agents.base_environment(run.home, run.data)
    return subprocess.run([*CLI, "search", query], env=env, cwd=run.work, capture_output=True,
                          text=True, timeout=START_TIMEOUT)


def ledger_files(run: Run) -> list[Path]:
    """The data home's ledger conversations that hold the task prompt as a block of its own
    (OpenCode sends it in quotes) and the first step's output (a title request quotes the
    prompt, and is a conversation of its own, but never holds an output)."""
    folder = run.data / "ledger"
    if not folder.is_dir():
        return []
    prompts = (json.dumps(task.PROMPT), json.dumps(f'"{task.PROMPT}"'))
    return sorted(p for p in folder.glob("*.jsonl")
                  if any(prompt in (text := p.read_text(errors="replace")) for prompt in prompts)
                  and "E2E STEP 01" in text)


def environment_for(run: Run) -> dict[str, str]:
    return {**agents.base_environment(run.home, run.data), "PYTHONUNBUFFERED": "1",
            **({"VIRTUAL_ENV": os.environ["VIRTUAL_ENV"]} if "VIRTUAL_ENV" in os.environ
               else {})}


def stats_json(run: Run, ref: str) -> dict:
    """``context-paging stats --session REF --json`` over the run's data home."""
    env = agents.base_environment(run.home, run.data)
    done = subprocess.run([*CLI, "stats", "--session", ref, "--json"], env=env, cwd=run.work,
                          capture_output=True, text=True, timeout=START_TIMEOUT)
    return json.loads(done.stdout) if done.returncode == 0 else {}


def statusline(run: Run) -> str:
    """``context-paging statusline`` as Claude Code would run it for the run's session (its
    id is the name of the session file Claude Code wrote)."""
    found = sorted((run.home / ".claude" / "projects").glob("*/*.jsonl"),
                   key=lambda p: p.stat().st_size)
    if not found:
        return "(no Claude Code session file)"
    env = agents.base_environment(run.home, run.data)
    stdin = json.dumps({"session_id": found[-1].stem, "transcript_path": str(found[-1]),
                        "cwd": str(run.work), "model": {"id": "claude"}})
    done = subprocess.run([*CLI, "statusline"], env=env, cwd=run.work, input=stdin,
                          capture_output=True, text=True, timeout=START_TIMEOUT)
    return done.stdout.strip()
