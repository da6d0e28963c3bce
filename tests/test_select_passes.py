"""The selector's passes over the whole conversation, rewritten to run in C,
give what the Python loops they replace gave."""

from __future__ import annotations

from context_paging.paging import units
from hypothesis import given
from hypothesis import strategies as st

ROLES = ["user", "assistant", "toolResult", "custom", "system", "bashExecution", None, 7]


def starts_as_a_loop(messages, atoms, outgoing) -> list[int]:
    """``units._request_starts`` as it was: one Python loop over the atoms."""
    starts: list[int] = []
    follows_user = False
    for position, atom in enumerate(atoms):
        first = atom[0]
        if outgoing[first]:
            continue
        role = messages[first].get("role")
        if role == "user":
            starts.append(position)
            follows_user = True
        elif role == "custom":
            if not follows_user:
                starts.append(position)
        else:
            follows_user = False
    return starts


@given(st.lists(st.tuples(st.sampled_from(ROLES), st.integers(1, 3), st.booleans()),
                max_size=40),
       st.booleans())
def test_request_starts_are_the_loops(spec, any_outgoing):
    messages, atoms, outgoing = [], [], []
    for role, size, flag in spec:
        atom = tuple(range(len(messages), len(messages) + size))
        messages += [{"role": role}] + [{"role": "toolResult"}] * (size - 1)
        outgoing += [flag and any_outgoing] * size
        atoms.append(atom)
    roles = [m.get("role") for m in messages]
    expected = starts_as_a_loop(messages, atoms, outgoing)
    assert units._request_starts(messages, atoms, outgoing) == expected
    assert units._request_starts(messages, atoms, outgoing, roles) == expected
    assert units.group(messages, atoms, outgoing, roles) == units.group(messages, atoms, outgoing)
