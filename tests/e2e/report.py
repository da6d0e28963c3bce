"""A proxied run judged against the same agent's direct run: the facts of its summary line and
every rule it broke, each named with the request it concerns."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

from tests.e2e import checks, runs, task

SEARCH_TIMEOUT = 60.0


@dataclass
class Outcome:
    label: str
    complete: bool = False
    paged: int = 0
    invalid: int = 0
    lost: int = 0
    ledgers: int = 0
    cuts: int = 0
    requests: int = 0
    bytes_sent: int = 0
    bytes_direct: int = 0
    found: str = "not searched"
    bypassed: int = 0
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        ratio = f"{self.bytes_sent / self.bytes_direct:.0%}" if self.bytes_direct else "n/a"
        around = f", requests around the proxy {self.bypassed}" if self.bypassed else ""
        return (f"{self.label}: complete {'yes' if self.complete else 'NO'}, "
                f"paged {self.paged}/{self.requests} requests, "
                f"invalid requests {self.invalid}, "
                f"requests that lost tools or instructions {self.lost}, "
                f"ledgers per session {self.ledgers}, cut advances {self.cuts}, "
                f"evicted markers found: {self.found}, bytes vs direct {ratio}{around}")


def judge_direct(run: runs.Run) -> Outcome:
    """The unmodified agent against the fake: it must finish with nothing refused, unpaged."""
    exchanges = run.provider.task_exchanges()
    outcome = _common(run, exchanges)
    outcome.bytes_direct = outcome.bytes_sent
    if outcome.paged:
        outcome.problems.append(f"requests {checks.paged(exchanges)[:5]} look paged in a "
                                "direct run")
    for brk in checks.cache_breaks(exchanges):
        outcome.problems.append(f"request {brk.number}: the agent itself broke the cache "
                                f"prefix ({brk.detail})")
    return outcome


def judge_proxied(run: runs.Run, direct: runs.Run) -> Outcome:
    exchanges = run.provider.task_exchanges()
    outcome = _common(run, exchanges)
    outcome.bytes_direct = checks.sent_bytes(direct.provider.task_exchanges())
    if not outcome.paged:
        outcome.problems.append(f"no request was paged (budget {run.agent.budget} tokens; the "
                                "direct run sent up to "
                                f"{_largest(direct) // 4:,} tokens' worth of characters)"
                                + _proxy_said(run))
    breaks = checks.cache_breaks(exchanges)
    outcome.cuts = sum(1 for b in breaks if b.cut_advance)
    outcome.problems += [f"request {b.number}: a cache break that is not a cut advance: "
                         f"{b.detail}" for b in breaks if not b.cut_advance]
    ledgers = runs.ledger_files(run)
    outcome.ledgers = _one_ledger(run, outcome)
    if outcome.paged:
        outcome.found = _search(run, outcome)
    if len(ledgers) == 1:
        outcome.problems += view_problems(run, outcome, f"ledger:{ledgers[0].stem}")
    return outcome


def _one_ledger(run: runs.Run, outcome: Outcome) -> int:
    """How many ledger conversations hold the agent's one session (a problem unless 1)."""
    ledgers = runs.ledger_files(run)
    if len(ledgers) != 1:
        names = ", ".join(p.name for p in ledgers) or "none"
        outcome.problems.append(f"the agent's one session is in {len(ledgers)} ledger "
                                f"conversations ({names}), not 1")
    return len(ledgers)


def judge_inband(run: runs.Run) -> Outcome:
    """A run without the MCP server whose scripted model called the proxy's offered
    ``search_history``: the task completes, the proxy answered the call itself (the follow-up
    carries the evicted marker in the tool result, the next request carries the hidden exchange
    in place), the agent never saw the call, no request was invalid, and every cache break is a
    cut advance."""
    exchanges = run.provider.task_exchanges()
    outcome = _common(run, exchanges)
    breaks = checks.cache_breaks(exchanges)
    outcome.cuts = sum(1 for b in breaks if b.cut_advance)
    outcome.problems += [f"request {b.number}: a cache break that is not a cut advance: "
                         f"{b.detail}" for b in breaks if not b.cut_advance]
    outcome.problems += checks.inband_problems(exchanges, task.evicted_markers(1)[0])
    outcome.ledgers = _one_ledger(run, outcome)
    files = checks.session_files(run.home)
    if not any(task.PROMPT_TOKEN.encode() in p.read_bytes() for p in files):
        outcome.problems.append("no session file of the agent holds the task, so nothing shows "
                                f"whether it saw the proxy's call ({len(files)} files)")
    seen = [str(p) for p in files if b'"search_history"' in p.read_bytes()]
    if seen or "search_history" in run.stdout:
        outcome.problems.append("the agent saw the proxy's recovery call: "
                                + (", ".join(seen) or "in its output"))
    return outcome


def view_problems(run: runs.Run, outcome: Outcome, ref: str) -> list[str]:
    """The live view's row for the agent's conversation (over HTTP from the running proxy on
    the install route, from the home's files on the run route) agrees with ``stats --json``
    and with what reached the provider; Claude Code's status line shows the same cuts."""
    from context_paging.server.proxy.view import conversations

    rows = run.view if run.route == "install" else conversations(run.data)
    row = next((r for r in rows or () if r["session"] == ref), None)
    if row is None:
        return [f"the live view does not list {ref} ({len(rows or ())} conversations)"]
    stats = runs.stats_json(run, ref)
    proxy = stats.get("proxy") or {}
    problems = []
    for key, theirs in (("requests", "requests"), ("cut_advances", "cut_advances"),
                        ("tokens_sent", "sent_tokens"), ("tokens_full", "full_tokens")):
        if row[key] != proxy.get(theirs):
            problems.append(f"live view {key} {row[key]} != stats --json {proxy.get(theirs)}")
    if row["requests"] < outcome.requests:  # every task request went through this one
        problems.append(f"live view: {row['requests']} requests, the provider saw "
                        f"{outcome.requests} of the task")
    if bool(row["paged"]) != bool(outcome.paged) or bool(row["cut_advances"]) != bool(
            outcome.cuts):
        problems.append(f"live view: {row['paged']} paged and {row['cut_advances']} cut "
                        f"advances; the provider saw {outcome.paged} paged and {outcome.cuts}")
    if run.agent.name == "claude":
        line = runs.statusline(run)
        cuts = row["cut_advances"]
        if not (line.startswith("paging: window ")
                and line.endswith(f"{cuts} cut{'' if cuts == 1 else 's'}")):
            problems.append(f"Claude Code's status line: {line!r}")
    return problems


def _common(run: runs.Run, exchanges: list) -> Outcome:
    outcome = Outcome(f"{run.agent.label} via {run.route}")
    outcome.requests = len(exchanges)
    outcome.complete = run.returncode == 0 and task.DONE in run.stdout \
        and checks.completed(exchanges)
    if not outcome.complete:
        steps = max((e.done_steps for e in exchanges), default=0)
        outcome.problems.append(f"the task did not complete: {steps}/{task.STEPS} steps, "
                                f"agent exit {run.returncode}")
    invalid = run.provider.invalid()
    outcome.invalid = len(invalid)
    outcome.problems += [f"{e.where} refused: {'; '.join(e.problems)[:400]}" for e in invalid]
    outcome.bypassed = run.provider.bypassed
    if run.provider.bypassed:
        outcome.problems.append(f"{run.provider.bypassed} requests went to the agent's "
                                "configured provider, not through the proxy")
    lost = checks.lost_resident(exchanges)
    outcome.lost = len(lost)
    outcome.problems += [p for problems in lost.values() for p in problems]
    outcome.problems += checks.repeated_context(exchanges)
    outcome.paged = len(checks.paged(exchanges))
    outcome.bytes_sent = checks.sent_bytes(exchanges)
    return outcome


def _proxy_said(run: runs.Run) -> str:
    """The proxy's first log line about a request, with how many it wrote, if any."""
    said = [line.strip() for line in run.stderr.splitlines() if "proxy: " in line]
    return f"; the proxy logged {len(said)} lines like: {said[0][:240]}" if said else ""


def _largest(run: runs.Run) -> int:
    return max((len(e.request.body) for e in run.provider.task_exchanges()), default=0)


def _search(run: runs.Run, outcome: Outcome) -> str:
    """Look the first step's markers up with no session: the CLI and search_history over
    MCP (the SDK client, the server on stdio), both from the run's work folder."""
    marker = task.evicted_markers()[0]
    found = []
    cli = runs.search_cli(run, marker)
    if cli.returncode == 0 and "step-01" in cli.stdout:
        found.append("cli")
    else:
        outcome.problems.append(f"`context-paging search {marker}` (no session) did not find "
                                f"the evicted step: exit {cli.returncode}, "
                                f"{(cli.stdout + cli.stderr)[-300:]!r}")
    try:
        reply = anyio.run(_search_mcp, run, marker)
    except Exception as exc:  # a broken server must fail the run with its reason
        reply = f"{type(exc).__name__}: {exc}"
    if reply is None:
        found.append("mcp")
    else:
        outcome.problems.append(f"search_history({marker!r}) over MCP (no session) did not "
                                f"find the evicted step: {reply[:300]}")
    return "+".join(found) or "no"


async def _search_mcp(run: runs.Run, marker: str) -> str | None:
    env = runs.environment_for(run)
    params = StdioServerParameters(command=runs.CLI[0], args=[*runs.CLI[1:], "serve"],
                                   env=env, cwd=str(run.work))
    with open(run.data / "serve-stderr.txt", "w") as errlog, anyio.fail_after(SEARCH_TIMEOUT):
        async with Client(stdio_client(params, errlog=errlog)) as client:
            result = await client.call_tool("search_history", {"query": marker})
    if result.is_error:
        return " ".join(getattr(c, "text", "") for c in result.content)
    references = (result.structured_content or {}).get("references") or []
    if not any("step-01" in str(r.get("preview")) or marker in str(r) for r in references):
        return f"{len(references)} references, none of step 1: {str(references)[:200]}"
    # the hit shows the line as the agent printed it: whatever shape the tool output was stored
    # in (Codex's exec output is JSON in text), the marker stands in decoded text
    shown = [m.get("text", "") for r in references for m in r.get("matches") or ()]
    if not any(marker in text and "\\n" not in text and "\\u" not in text for text in shown):
        return f"no matched line shows {marker} decoded: {shown[:3]}"
    return None
