"""The ledger knows the path its last append stored (``LedgerSession._chain``), so an append
looks only at what is new and ``path_to`` / ``path_ids`` answer the usual question (the last
head) without walking the whole conversation. Whatever the appends — growing, branching,
truncating, with outgoing-only messages, with another reader's lines in between — the answers
must be those of the walk over the stored records."""

from __future__ import annotations

import json

from context_paging.index.ledger import Ledger, LedgerSession, fingerprint
from context_paging.paging.request import chain_ids
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st


def walk(session: LedgerSession, message_id: str | None) -> list[str] | None:
    """The reference: parents followed back from ``message_id`` over the stored records."""
    out: list[str] = []
    seen: set[str] = set()
    while message_id is not None:
        record = session.records.get(message_id)
        if record is None or message_id in seen:
            return None
        seen.add(message_id)
        out.append(message_id)
        message_id = record.get("parent")
    return out[::-1]


def ids_for(messages: list[dict], outgoing: set[int]) -> list[str | None]:
    """The request's ids as ``paging.request`` gives them: outgoing messages have none and take
    no part in the chain."""
    prints = [None if i in outgoing else fingerprint(m) for i, m in enumerate(messages)]
    return list(chain_ids(prints))


def message(n: int) -> dict:
    return {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n}"}


# Each step: keep a prefix of the last conversation (a branch or a truncation when shorter),
# add new messages, maybe mark some as outgoing-only; maybe re-read the file as a new reader.
steps = st.lists(st.tuples(st.integers(0, 12), st.integers(0, 6),
                           st.sets(st.integers(0, 18), max_size=3), st.booleans()),
                 min_size=1, max_size=8)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=steps)
def test_paths_and_appends_are_the_walks(tmp_path_factory, steps):
    home = tmp_path_factory.mktemp("chain")
    ledger = Ledger(home)
    session = ledger.session("ledger:s")
    conversation: list[dict] = []
    counter = 0
    for keep, grow, outgoing, reread in steps:
        conversation = conversation[:keep]
        for _ in range(grow):
            conversation.append(message(counter))
            counter += 1
        flags = {i for i in outgoing if i < len(conversation)}
        ids = ids_for(conversation, flags)
        before = set(session.records)
        new = session.append(conversation, ids, "pi")
        stored = [i for i in ids if i is not None]
        assert new == len(set(stored) - before)
        assert session.head == (stored[-1] if stored else None)
        assert session.path_ids() == (walk(session, session.head) or [])
        for message_id in stored:
            assert session.path_to(message_id) == walk(session, message_id)
        assert session.path_to("m-not-stored") is None
        if reread:  # a new reader of the same file: no chain known, the walks answer
            session = Ledger(home).session("ledger:s")
            assert session.path_ids() == (walk(session, session.head) or [])


def test_a_record_stored_with_another_parent_is_not_trusted(tmp_path):
    """A ledger line that gives a known id another parent (a damaged or foreign file): the
    first record read wins, and the paths follow it, not the request's order."""
    messages = [message(n) for n in range(4)]
    ids = ids_for(messages, set())
    path = tmp_path / "ledger" / "s.jsonl"
    path.parent.mkdir(parents=True)
    # The third message stored first, as if its parent were the first message.
    path.write_text(json.dumps({"type": "message", "id": ids[2], "parent": ids[0],
                                "format": "pi", "ts": "t", "message": messages[2]}) + "\n")
    session = Ledger(tmp_path).session("ledger:s")
    session.append(messages, ids, "pi")
    assert session.path_ids() == walk(session, session.head) == [ids[0], ids[2], ids[3]]
    assert session.path_to(ids[3]) == [ids[0], ids[2], ids[3]]
    # The next append of a longer conversation still answers as the walk.
    more = [*messages, message(4)]
    session.append(more, ids_for(more, set()), "pi")
    assert session.path_ids() == walk(session, session.head)


def test_records_stay_what_was_sent_when_the_host_edits_its_messages_afterwards(tmp_path):
    """A library host may change its own dicts in place after a call. The ledger's records (in
    Pi, the views' copies; in other formats, copies of their own) keep what the call stored, in
    memory and on disk."""
    from context_paging.index.window.pipeline import ContextService, ContextSettings

    service = ContextService(Ledger(tmp_path), ContextSettings(token_budget=10_000), None)
    pi = [{"role": "user", "content": [{"type": "text", "text": "read a.py"}], "timestamp": 1},
          {"role": "assistant", "stopReason": "toolUse", "timestamp": 2, "content": [
              {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a.py"}}]},
          {"role": "toolResult", "toolCallId": "c1", "toolName": "read", "isError": False,
           "timestamp": 3, "content": [{"type": "text", "text": "print(1)"}]}]
    anthropic = [{"role": "user", "content": [{"type": "text", "text": "hello"}]},
                 {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]
    for session, fmt, messages in (("p", "pi", pi), ("a", "anthropic", anthropic)):
        sent = json.loads(json.dumps(messages))
        service.select(session, messages, fmt=fmt)
        messages[0]["content"][0]["text"] = "edited"
        messages[-1]["content"].append({"type": "text", "text": "more"})
        ledger = service.ledger.session(session)
        stored = [ledger.records[i]["message"] for i in ledger.path_ids()]
        assert stored == sent
        again = Ledger(tmp_path).session(session)  # read back from the file
        assert [again.records[i]["message"] for i in again.path_ids()] == sent
