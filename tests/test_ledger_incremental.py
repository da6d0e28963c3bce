"""The ledger's history items are projected incrementally (the hot path):
a conversation that grows, branches, ends mid-exchange or switches format must give exactly
the items a fresh projection of the whole stored path gives."""

from __future__ import annotations

from pathlib import Path

from context_paging.index.history import project
from context_paging.index.ledger import Ledger, LedgerSession, fingerprint
from context_paging.paging.request import chain_ids
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def turn(n: int, calls: int, answered: int, text: bool, error: bool,
         reused: bool = False) -> list[dict]:
    """One Pi-shaped turn: a request, an assistant with ``calls`` tool calls, ``answered`` of
    their results (fewer: the exchange is pending or incomplete), maybe a closing answer.
    ``reused``: call ids shared with other turns, each turn's tool named after it, and results
    that do not name their tool (so it is looked up by call id, across messages)."""
    out: list[dict] = [{"role": "user", "content": f"request {n}"}]
    if calls:
        out.append({"role": "assistant", "stopReason": "toolUse", "content": [
            {"type": "toolCall", "id": f"c{k}" if reused else f"c{n}-{k}",
             "name": f"tool{n}" if reused else "read",
             "arguments": {"path": f"src/f{n}_{k}.py"}} for k in range(calls)]})
        out += [{"role": "toolResult", "toolCallId": f"c{k}" if reused else f"c{n}-{k}",
                 "isError": error and k == 0, "content": [{"type": "text", "text": f"r{n}{k}"}]}
                | ({} if reused else {"toolName": "read"})
                # reused: maybe a result for a call of an earlier turn (or of a dropped branch)
                for k in range(answered if reused else min(answered, calls))]
    if text:
        out.append({"role": "assistant", "stopReason": "stop",
                    "content": [{"type": "text", "text": f"answer {n}"}]})
    return out


turns = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.booleans(), st.booleans()),
                 min_size=1, max_size=6)


def store(session: LedgerSession, messages: list[dict]) -> None:
    session.append(messages, chain_ids([fingerprint(m) for m in messages]), "pi")


def fresh_items(home: Path) -> tuple:
    """The reference: a new reader of the same file, projecting the whole path at once."""
    session = Ledger(home).session("ledger:s")
    return project(session.messages(), str(session.path)).items


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.tuples(turns, st.integers(0, 3)), min_size=1, max_size=6),
       reused=st.booleans())
def test_items_match_a_fresh_projection(tmp_path_factory, steps, reused) -> None:
    home = tmp_path_factory.mktemp("ledger")
    session = Ledger(home).session("ledger:s")
    conversation: list[dict] = []
    serial = 0
    for new_turns, back in steps:
        # ``back`` > 0 drops that many messages first: an edited history, a new branch.
        if back and conversation:
            conversation = conversation[:max(0, len(conversation) - back)]
        for calls, answered, text, error in new_turns:
            serial += 1
            conversation += turn(serial, calls, answered, text, error, reused)
        store(session, conversation)
        got = session.items()
        assert got == fresh_items(home)
        assert [item.sequence for item in got] == list(range(len(got)))
        # the messages the recovery tools read are the whole path too
        assert session.messages() == Ledger(home).session("ledger:s").messages()


def test_growing_conversation_projects_only_the_new_turn(tmp_path, monkeypatch) -> None:
    """The point of it: one more turn projects that turn, not the whole history."""
    import context_paging.index.ledger as ledger_module

    session = Ledger(tmp_path).session("ledger:s")
    conversation = [m for n in range(50) for m in turn(n, 1, 1, True, False)]
    store(session, conversation)
    session.items()
    projected: list[int] = []
    real = ledger_module.project

    def counting(messages, path=""):
        projected.append(len(messages))
        return real(messages, path)

    monkeypatch.setattr(ledger_module, "project", counting)
    conversation += turn(50, 1, 1, True, False)
    store(session, conversation)
    items = session.items()
    assert projected and max(projected) <= 8  # the last turns only, not 200+ messages
    monkeypatch.undo()
    assert items == fresh_items(tmp_path)


def test_a_branch_forgets_the_tool_names_of_the_messages_it_left(tmp_path) -> None:
    """A result that does not name its tool takes the name of the newest call with its id on
    the path; a branch that dropped a later call of that id must not see its name (the
    conversion of the last path is cut back, names included, not just extended)."""
    session = Ledger(tmp_path).session("ledger:s")
    kept = turn(1, 2, 2, True, False, reused=True)  # calls c0, c1 named tool1
    store(session, kept + turn(2, 2, 2, False, False, reused=True))  # c0, c1 named tool2
    session.items()
    # The second turn is dropped; the new one calls c0 only and answers c0 and c1.
    store(session, kept + turn(3, 1, 2, True, False, reused=True))
    got = session.messages()
    assert got == Ledger(tmp_path).session("ledger:s").messages()
    assert [m.tool_name for m in got if m.role == "tool_result"][-1] == "tool1"
    assert session.items() == fresh_items(tmp_path)
