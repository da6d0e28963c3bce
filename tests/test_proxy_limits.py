"""The proxy's limits over real HTTP: bodies over the size setting stream through unpaged, one
conversation's paging never holds up another's, and disabled paging passes requests through
unread."""

from __future__ import annotations

import json
import logging
import threading

import httpx2 as httpx
from context_paging.server.proxy import wire

from tests.test_proxy import Stack, make_home, tool_turn

HEADERS = {"x-api-key": "sk-ant-test", "anthropic-version": "2023-06-01",
           "content-type": "application/json"}


def body(session: str, turns: int = 12, output: str = "") -> bytes:
    messages: list[dict] = [{"role": "user", "content": f"start {session}"}]
    for i in range(turns):
        messages += tool_turn(i)
    if output:
        messages[-1]["content"][0]["content"] = output
    messages.append({"role": "user", "content": "go on"})
    user_id = json.dumps({"device_id": "d", "account_uuid": "", "session_id": session})
    return json.dumps({"model": "m", "max_tokens": 5, "messages": messages,
                       "metadata": {"user_id": user_id}}).encode()


def ledger_files(stack: Stack) -> list[str]:
    directory = stack.home / "ledger"
    return sorted(p.name for p in directory.glob("*.jsonl")) if directory.is_dir() else []


def test_a_body_over_the_size_setting_reaches_the_provider_unpaged_and_unrecorded(tmp_path,
                                                                                  caplog):
    stack = Stack(make_home(tmp_path, budget=2000))
    stack.proxy_app.max_body = 50_000
    try:
        raw = body("large", output="x" * 60_000)
        with caplog.at_level(logging.WARNING, logger="context_paging"):
            response = httpx.post(f"{stack.url}/v1/messages", content=raw, headers=HEADERS)
        assert response.status_code == 200
        forwarded = stack.provider.requests[-1]
        assert forwarded.body == raw
        assert forwarded.headers["content-length"] == str(len(raw))
        assert ledger_files(stack) == []
        lines = [r.getMessage() for r in caplog.records if r.name == "context_paging"]
        assert len(lines) == 1 and "max_request_bytes" in lines[0]
        # a body under the setting is still paged
        small = body("small")
        httpx.post(f"{stack.url}/v1/messages", content=small, headers=HEADERS)
        assert len(stack.provider.requests[-1].body) < len(small)
        assert len(ledger_files(stack)) == 1
    finally:
        stack.close()


def test_a_chunked_body_over_the_size_setting_streams_through_from_its_first_byte(tmp_path):
    stack = Stack(make_home(tmp_path, budget=2000))
    stack.proxy_app.max_body = 50_000
    try:
        raw = body("chunked", output="y" * 80_000)

        def pieces():
            for at in range(0, len(raw), 7_000):
                yield raw[at:at + 7_000]

        response = httpx.post(f"{stack.url}/v1/messages", content=pieces(), headers=HEADERS)
        assert response.status_code == 200
        assert stack.provider.requests[-1].body == raw
        assert ledger_files(stack) == []
    finally:
        stack.close()


def test_a_conversation_being_paged_does_not_hold_up_another(tmp_path):
    """The first conversation's select_context is held until the second one's request has
    gone through; with one lock for all conversations the second would wait for it."""
    release, held = threading.Event(), threading.Event()
    stack: Stack | None = None

    def select(session, *args, **kwargs):
        if "slow" in session:
            held.set()
            release.wait(20)
        return stack.history.select_context(session, *args, **kwargs)

    stack = Stack(make_home(tmp_path), select=select)
    try:
        slow: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: slow.append(httpx.post(
            f"{stack.url}/v1/messages", content=body("slow"), headers=HEADERS, timeout=30)))
        sender.start()
        assert held.wait(10)
        quick = httpx.post(f"{stack.url}/v1/messages", content=body("quick"), headers=HEADERS,
                           timeout=5)
        assert quick.status_code == 200 and not slow
        release.set()
        sender.join(30)
        assert slow[0].status_code == 200
    finally:
        release.set()
        stack.close()


def test_calls_of_one_session_run_one_at_a_time_and_of_two_sessions_side_by_side():
    from context_paging.index.window.gate import Gate

    gate = Gate()
    inside: dict[str, int] = {"a": 0, "b": 0}
    most = {"a": 0, "together": 0}
    both = threading.Barrier(2, timeout=5)
    lock = threading.Lock()

    def call(name: str, meet: bool) -> None:
        with gate.session(name):
            with lock:
                inside[name] += 1
                most["a"] = max(most["a"], inside["a"])
                most["together"] = max(most["together"], inside["a"] + inside["b"])
            if meet:
                both.wait()  # only returns once a call of the other session is inside too
            with lock:
                inside[name] -= 1

    threads = [threading.Thread(target=call, args=("a", True)),
               threading.Thread(target=call, args=("b", True))]
    threads += [threading.Thread(target=call, args=("a", False)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert most == {"a": 1, "together": 2}
    assert gate.acquire()  # spare-time work only once no call runs
    gate.release()


def test_spare_time_work_waits_while_a_call_runs():
    from context_paging.index.window.gate import Gate

    gate = Gate()
    with gate.session("a"):
        assert not gate.acquire()
    assert gate.acquire()
    gate.release()


def test_with_paging_disabled_requests_pass_through_unread_and_unrecorded(tmp_path, caplog,
                                                                          monkeypatch):
    stack = Stack(make_home(tmp_path, paging=False))
    stack.proxy_app.paging = False  # as make_app sets it from paging.enabled

    def unread(*args, **kwargs):
        raise AssertionError("the body was parsed")

    monkeypatch.setattr(wire, "read_body", unread)
    try:
        raw = body("off")
        with caplog.at_level(logging.WARNING, logger="context_paging"):
            response = httpx.post(f"{stack.url}/v1/messages", content=raw, headers=HEADERS)
        assert response.status_code == 200
        assert stack.provider.requests[-1].body == raw
        assert ledger_files(stack) == []
        assert not [r for r in caplog.records if r.name == "context_paging"]
        listing = httpx.get(f"{stack.url}/v1/models", headers=HEADERS)
        assert listing.status_code == 200 and stack.provider.requests[-1].body == b""
        assert "transfer-encoding" not in stack.provider.requests[-1].headers
    finally:
        stack.close()


def test_make_app_takes_paging_and_the_size_bound_from_the_settings(tmp_path):
    import argparse

    from context_paging.server.config import load_settings
    from context_paging.server.proxy.commands import make_app

    home = make_home(tmp_path, paging=False)
    settings = load_settings(home=str(home), overrides={"paging.max_request_bytes": 12345})
    args = argparse.Namespace(upstream_anthropic="http://127.0.0.1:9",
                              upstream_openai="http://127.0.0.1:9")
    app, history = make_app(settings, args)
    try:
        assert (app.paging, app.max_body) == (False, 12345)
    finally:
        history.close()


def test_conversations_paged_at_once_get_the_windows_they_get_one_after_another(tmp_path):
    """Four conversations, each growing over eight requests, sent from four threads at once
    to one proxy, and one after another to another: every request's forwarded body is the
    same (what conversations share is safe to share)."""
    def script(name: str) -> list[bytes]:
        return [body(name, turns=turns) for turns in range(4, 20, 2)]

    names = ["alpha", "beta", "gamma", "delta"]
    (tmp_path / "together").mkdir()
    (tmp_path / "apart").mkdir()
    together = Stack(make_home(tmp_path / "together", budget=1500))
    apart = Stack(make_home(tmp_path / "apart", budget=1500))
    try:
        def run(name: str) -> None:
            with httpx.Client(timeout=60) as client:
                for raw in script(name):
                    client.post(f"{together.url}/v1/messages", content=raw, headers=HEADERS)

        threads = [threading.Thread(target=run, args=(name,)) for name in names]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        forwarded: dict[str, list[bytes]] = {name: [] for name in names}
        for request in together.provider.requests:
            session = json.loads(json.loads(request.body)["metadata"]["user_id"])["session_id"]
            forwarded[session].append(request.body)
        for name in names:
            for raw, got in zip(script(name), forwarded[name], strict=True):
                httpx.post(f"{apart.url}/v1/messages", content=raw, headers=HEADERS)
                assert apart.provider.requests[-1].body == got
            assert len(got) < len(raw)  # paged
    finally:
        together.close()
        apart.close()
