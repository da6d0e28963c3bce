"""The suite's own parts, without the agents: the validating provider's rules, the scripted
task, the cache-break classifier and the install script. These run everywhere."""

from __future__ import annotations

import json
import stat

import anthropic
import httpx2 as httpx
import openai
import pytest

from tests.e2e import checks, install_agents, task, validate
from tests.e2e.provider import Exchange, ScriptedProvider
from tests.fake_provider import Recorded, Served


def user(*blocks):
    return {"role": "user", "content": list(blocks)}


def text(value):
    return {"type": "text", "text": value}


def call(call_id, name="Bash"):
    return {"type": "tool_use", "id": call_id, "name": name, "input": {"command": "ls"}}


def result(call_id, output="out"):
    return {"type": "tool_result", "tool_use_id": call_id, "content": output}


def messages_body(messages, tools=("Bash",)):
    return {"model": "claude-x", "max_tokens": 100, "messages": messages,
            "tools": [{"name": n, "input_schema": {"type": "object"}} for n in tools]}


# --- Anthropic rules ----------------------------------------------------------------------------


def test_a_well_paired_tool_exchange_with_claude_codes_system_messages_is_accepted():
    body = messages_body([user(text("go")), {"role": "system", "content": "agent types"},
                          {"role": "assistant", "content": [text("run"), call("t1")]},
                          user(result("t1"), text("next")), {"role": "system", "content": "hi"}])
    assert validate.anthropic_problems(body) == []


def test_a_tool_use_whose_result_is_not_in_the_next_message_is_refused():
    body = messages_body([user(text("go")), {"role": "assistant", "content": [call("t1")]},
                          user(text("no result"))])
    assert validate.anthropic_problems(body) == [
        "messages.1: tool_use 't1' has no tool_result in the next message"]


def test_a_tool_result_without_its_tool_use_in_the_previous_message_is_refused():
    body = messages_body([user(text("go")), {"role": "assistant", "content": [text("hm")]},
                          user(result("t9"))])
    assert validate.anthropic_problems(body) == [
        "messages.2: tool_result for 't9' has no tool_use in the previous message"]


def test_tool_results_after_other_blocks_of_their_message_are_refused():
    body = messages_body([user(text("go")), {"role": "assistant", "content": [call("t1")]},
                          user(text("first"), result("t1"))])
    assert validate.anthropic_problems(body) == [
        "messages.2: tool_result blocks must come first in the message"]


def test_tool_blocks_without_any_tools_defined_are_refused():
    body = messages_body([user(text("go")), {"role": "assistant", "content": [call("t1")]},
                          user(result("t1"))], tools=())
    del body["tools"]
    assert validate.anthropic_problems(body) == [
        "tools: the messages hold tool_use/tool_result blocks but no tools are defined"]


def test_missing_fields_wrong_roles_and_empty_text_are_each_named():
    body = {"model": "claude-x", "messages": [{"role": "tool", "content": "x"},
                                              user(text(""))]}
    assert validate.anthropic_problems(body) == [
        "max_tokens: field required",
        "messages.0.role: 'tool' is not user, assistant or system",
        "messages.1.content.0: text blocks must be non-empty"]


def test_a_fifth_cache_breakpoint_is_refused():
    marked = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}
    body = messages_body([user(marked, marked, marked), {"role": "assistant",
                                                         "content": [marked, marked]}])
    assert validate.anthropic_problems(body) == [
        "cache_control: 5 breakpoints; at most 4 allowed"]


@pytest.mark.parametrize(("raw", "reason"), [
    (b'{"model": NaN}', "NaN is not JSON"),
    (b'{"model": "a", "model": "b"}', "duplicate key 'model' in a JSON object"),
    (b'[1, 2]', "body is a JSON list, not an object"),
    (b'{"model": "\xff"}', "body is not UTF-8 (byte 11)"),
])
def test_bodies_that_are_not_strict_json_objects_are_refused_with_the_reason(raw, reason):
    with pytest.raises(validate.Invalid, match=reason.replace("(", r"\(").replace(")", r"\)")):
        validate.strict_json(raw)


# --- Responses rules ----------------------------------------------------------------------------


def codex_default_body(*items):
    exec_tool = {"type": "custom", "name": "exec", "format": {"type": "grammar"}}
    return {"model": "gpt-x", "instructions": "", "tools": [], "input": [
        {"type": "additional_tools", "role": "developer",
         "tools": [{"type": "namespace", "name": "functions", "tools": [exec_tool]}]},
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "You are Codex"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        *items, {"type": "configuration_update", "reasoning": {"effort": "low"}}]}


REASONING = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "x"}
EXEC = {"type": "custom_tool_call", "call_id": "c1", "name": "exec", "input": "text(1)"}
EXEC_OUT = {"type": "custom_tool_call_output", "call_id": "c1", "output": "1"}


def test_codex_default_models_items_with_tools_in_additional_tools_are_accepted():
    assert validate.responses_problems(codex_default_body(REASONING, EXEC, EXEC_OUT)) == []


def test_a_call_whose_tool_left_the_request_is_refused():
    body = codex_default_body(REASONING, EXEC, EXEC_OUT)
    body["input"] = body["input"][1:]  # the additional_tools item is gone
    assert validate.responses_problems(body) == [
        "input.3: custom_tool_call of 'exec', but no tool of that name is defined "
        "(tools or additional_tools)"]


def test_calls_and_outputs_without_their_partner_are_refused():
    body = codex_default_body(REASONING, EXEC, {**EXEC_OUT, "call_id": "c2"})
    assert validate.responses_problems(body) == [
        "input.5: no tool call found for custom_tool_call_output with call_id 'c2'",
        "input.4: no tool output found for custom_tool_call with call_id 'c1'"]


def test_a_reasoning_item_separated_from_its_call_is_refused():
    body = codex_default_body(REASONING, EXEC_OUT)
    assert "input.3: reasoning item 'rs_1' was provided without its required following item" \
        in validate.responses_problems(body)


def test_function_call_arguments_must_be_a_json_string():
    item = {"type": "function_call", "call_id": "f1", "name": "shell", "arguments": "{bad"}
    body = {"model": "m", "tools": [{"type": "function", "name": "shell"}],
            "input": [item, {"type": "function_call_output", "call_id": "f1", "output": ""}]}
    assert validate.responses_problems(body) == [
        "input.0.arguments: body is not JSON: Expecting property name enclosed in double "
        "quotes at line 1 column 2"]


# --- the scripted task and the provider over HTTP -----------------------------------------------


def test_the_next_step_comes_from_the_newest_output_even_when_older_ones_left():
    body = messages_body([user(text(task.PROMPT)),
                          {"role": "assistant", "content": [call("t5")]},
                          user(result("t5", task.step_file(5)))])
    assert task.done_steps(body) == 5
    assert len(task.step_file(5).encode()) in range(8_000, 9_000)
    assert task.evicted_markers(5)[0] in task.step_file(5)


def test_the_provider_refuses_an_invalid_request_with_400_and_its_reasons():
    provider = ScriptedProvider()
    body = messages_body([user(text(task.PROMPT)), {"role": "assistant",
                                                    "content": [call("t1")]}])
    client_error = None
    with Served(provider) as fake, anthropic.Anthropic(base_url=fake.url, api_key="k",
                                                       max_retries=0) as client:
        try:
            client.messages.create(**body)
        except anthropic.BadRequestError as exc:
            client_error = exc
    assert client_error is not None and "its tool_result must follow" in str(client_error)
    assert [(e.answer, e.in_task) for e in provider.exchanges] == [("invalid", True)]
    assert provider.invalid()[0].problems == (
        "messages.1: tool_use 't1' is the last message; its tool_result must follow",)


def test_the_provider_streams_the_next_shell_call_to_the_anthropic_sdk():
    provider = ScriptedProvider()
    body = messages_body([user(text(task.PROMPT)), {"role": "assistant",
                                                    "content": [call("t1")]},
                          user(result("t1", task.step_file(1)))])
    with Served(provider) as fake, anthropic.Anthropic(base_url=fake.url, api_key="k",
                                                       max_retries=0) as client:
        with client.messages.stream(**body) as stream:
            message = stream.get_final_message()
    tool = [b for b in message.content if b.type == "tool_use"]
    assert [(t.name, t.input["command"]) for t in tool] == [("Bash", "cat step-02.txt")]
    assert message.stop_reason == "tool_use"


def test_the_provider_streams_codex_a_reasoning_item_with_its_exec_call_then_the_answer():
    provider = ScriptedProvider()
    with Served(provider) as fake, openai.OpenAI(base_url=f"{fake.url}/v1", api_key="k",
                                                 max_retries=0) as client:
        body = codex_default_body()
        body["input"][2]["content"][0]["text"] = task.PROMPT
        with client.responses.stream(**body) as stream:
            first = stream.get_final_response()
        done = codex_default_body(REASONING, EXEC, {**EXEC_OUT, "output":
                                                    task.step_file(task.STEPS)})
        with client.responses.stream(**done) as stream:
            last = stream.get_final_response()
    assert [item.type for item in first.output] == ["reasoning", "custom_tool_call"]
    assert "tools.exec_command({cmd: \"cat step-01.txt\"})" in first.output[1].input
    assert last.output_text == task.final_answer()


def test_a_task_request_without_a_shell_tool_is_answered_and_marked_as_lost_tools():
    provider = ScriptedProvider()
    body = messages_body([user(text(task.PROMPT))], tools=("Read",))
    with Served(provider) as fake, anthropic.Anthropic(base_url=fake.url, api_key="k") as client:
        client.messages.create(**body)
    assert [e.answer for e in provider.exchanges] == ["no-tools"]
    assert checks.lost_resident(provider.task_exchanges()) == {
        1: ["request 1 came with no shell tool the model could call"]}


# --- Gemini rules ------------------------------------------------------------------------------


def gemini_call(command, call_id="run_shell_command_1_0", signed=True):
    made = {"name": "run_shell_command", "args": {"command": command}}
    part = {"functionCall": {**made, "id": call_id}}
    if signed:
        part["thoughtSignature"] = validate.thought_signature(made)
    return {"role": "model", "parts": [part]}


def gemini_answer(output, call_id="run_shell_command_1_0"):
    return {"role": "user", "parts": [{"functionResponse": {
        "id": call_id, "name": "run_shell_command", "response": {"output": output}}}]}


def gemini_body(contents):
    return {"contents": contents, "tools": [{"functionDeclarations": [
        {"name": "run_shell_command", "parametersJsonSchema": {"type": "object"}}]}]}


def test_a_signed_gemini_call_answered_in_the_next_turn_is_accepted():
    contents = [{"role": "user", "parts": [{"text": "<session_context>"}, {"text": "go"}]},
                {"role": "user", "parts": [{"text": "and more"}]},
                gemini_call("ls"), gemini_answer("a b")]
    assert validate.gemini_problems(gemini_body(contents)) == []


def test_a_gemini_call_without_its_signature_or_answer_is_refused():
    contents = [{"role": "user", "parts": [{"text": "go"}]}, gemini_call("ls", signed=False),
                {"role": "user", "parts": [{"text": "no answer"}]}]
    assert validate.gemini_problems(gemini_body(contents)) == [
        "contents.1.parts.0: functionCall without the thought signature it was made with",
        "contents.1: 1 function calls, answered by 0 responses in the next turn (ids and "
        "names must match, in order)"]


def test_gemini_responses_without_calls_two_model_turns_and_mixed_parts_are_refused():
    contents = [{"role": "user", "parts": [{"text": "go", "inlineData": {}}]},
                {"role": "model", "parts": [{"text": "a"}]},
                {"role": "model", "parts": [{"text": "b"}]}, gemini_answer("lost")]
    assert validate.gemini_problems(gemini_body(contents)) == [
        "contents.0.parts.0: a part holds exactly one of text, inlineData, fileData, "
        "functionCall, functionResponse, executableCode, codeExecutionResult (found "
        "['text', 'inlineData'])",
        "contents.2: two model turns in a row",
        "contents.3: function responses with no function call in the turn before"]


def test_the_provider_streams_gemini_a_signed_call_then_the_answer():
    provider = ScriptedProvider()
    path = "/v1beta/models/gemini-x:streamGenerateContent?alt=sse"
    first = [{"role": "user", "parts": [{"text": task.PROMPT}]}]
    with Served(provider) as fake:
        with httpx.Client(base_url=fake.url) as client:
            reply = client.post(path, json=gemini_body(first))
            events = [json.loads(line[5:]) for line in reply.text.splitlines()
                      if line.startswith("data:")]
            parts = events[0]["candidates"][0]["content"]["parts"]
            made = parts[-1]
            assert made["functionCall"] == {"name": "run_shell_command",
                                            "args": {"command": "cat step-01.txt"}}
            assert made["thoughtSignature"] == validate.thought_signature(made["functionCall"])
            assert events[-1]["usageMetadata"]["promptTokenCount"] > 0
            unsigned = [*first, gemini_call("cat step-01.txt", signed=False),
                        gemini_answer(task.step_file(task.STEPS))]
            refused = client.post(path, json=gemini_body(unsigned))
            signed = [*first, gemini_call("cat step-01.txt"),
                      gemini_answer(task.step_file(task.STEPS))]
            last = client.post(path, json=gemini_body(signed))
    assert refused.status_code == 400
    assert refused.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert task.final_answer() in last.text
    assert [e.answer for e in provider.exchanges] == ["call", "invalid", "final"]


# --- cache breaks and the standing input --------------------------------------------------------


def exchange(number, messages, tools=("Bash",), system="You are an agent"):
    body = {**messages_body(messages, tools), "system": system}
    raw = json.dumps(body).encode()
    return Exchange(number, Recorded("POST", "/v1/messages", "", {}, raw), "anthropic", (),
                    True, task.done_steps(body), "call", body)


NOTICE = f"{checks.HEADER}\nEarlier messages left."
TURNS = [user(text(task.PROMPT)), {"role": "assistant", "content": [call("t1")]},
         user(result("t1", "one")), {"role": "assistant", "content": [call("t2")]},
         user(result("t2", "two"))]


def test_a_cut_that_drops_the_oldest_messages_behind_the_notice_is_a_cut_advance():
    paged = [user(text(NOTICE), text(task.PROMPT)), *TURNS[3:],
             {"role": "assistant", "content": [call("t3")]}, user(result("t3"))]
    breaks = checks.cache_breaks([exchange(1, TURNS), exchange(2, paged)])
    assert [(b.number, b.cut_advance) for b in breaks] == [(2, True)]


def test_appending_is_no_break_but_a_changed_or_unannounced_drop_is_one():
    grown = [*TURNS, {"role": "assistant", "content": [call("t3")]}, user(result("t3"))]
    changed = [*TURNS[:2], user(result("t1", "edited")), *TURNS[3:]]
    dropped = TURNS[3:]
    assert checks.cache_breaks([exchange(1, TURNS), exchange(2, grown)]) == []
    assert [b.detail for b in checks.cache_breaks([exchange(1, TURNS),
                                                   exchange(2, changed)])] == [
        "messages left the window but no paging notice took their place"]
    changed_paged = [user(text(NOTICE)), TURNS[3], user(result("t2", "edited"))]
    assert [b.detail for b in checks.cache_breaks([exchange(1, TURNS),
                                                   exchange(2, changed_paged)])] == [
        "message 2 changed: it holds tool call 't2' of the previous request with other bytes"]
    assert not checks.cache_breaks([exchange(1, TURNS), exchange(2, dropped)])[0].cut_advance


def test_a_distilled_stub_landing_with_the_cut_is_part_of_the_cut_advance():
    stub = "[distilled] The output of Bash: ls (3 chars) was left out: no longer needed."
    paged = [user(text(NOTICE), text(task.PROMPT)), TURNS[3], user(result("t2", stub)),
             {"role": "assistant", "content": [call("t3")]}, user(result("t3"))]
    breaks = checks.cache_breaks([exchange(1, TURNS), exchange(2, paged)])
    assert [(b.cut_advance, b.detail) for b in breaks] == [
        (True, "2 of the previous window's 5 messages left")]
    # landed alone, nothing left the window: a break of its own
    landed = [*TURNS[:4], user(result("t2", stub))]
    before = [user(text(NOTICE)), *TURNS[1:]]
    after = [user(text(NOTICE)), *landed[1:]]
    assert [b.detail for b in checks.cache_breaks([exchange(1, before), exchange(2, after)])] \
        == ["nothing left the window, yet the conversation changed"]
    # any other new bytes for a kept output are still that message changed
    assert not checks.cache_breaks([exchange(1, TURNS), exchange(2, [
        user(text(NOTICE)), TURNS[3], user(result("t2", "edited"))])])[0].cut_advance


def test_a_cut_past_the_previous_last_message_is_still_a_cut_advance():
    paged = [user(text(NOTICE), text(task.PROMPT)),
             {"role": "assistant", "content": [call("t3")]}, user(result("t3"))]
    breaks = checks.cache_breaks([exchange(1, TURNS), exchange(2, paged)])
    assert [(b.cut_advance, b.detail) for b in breaks] == [
        (True, "4 of the previous window's 5 messages left")]


def test_a_cut_that_keeps_repeated_identical_reminders_in_order_is_a_cut_advance():
    # Claude Code repeats one system reminder word for word; the window keeps each copy in
    # place while the turns between them leave.
    reminder = {"role": "system", "content": "The task tools haven't been used recently."}
    before = [user(text(NOTICE)), reminder, *TURNS[1:3], reminder, *TURNS[3:]]
    after = [user(text(NOTICE)), reminder, reminder, *TURNS[3:],
             {"role": "assistant", "content": [call("t3")]}, user(result("t3"))]
    moved = [user(text(NOTICE)), reminder, *TURNS[3:], reminder]
    assert [b.cut_advance for b in checks.cache_breaks([exchange(1, before),
                                                        exchange(2, after)])] == [True]
    assert [b.cut_advance for b in checks.cache_breaks([exchange(1, before),
                                                        exchange(2, moved)])] == [False]


def test_pinned_context_sent_twice_is_reported():
    reminder = text("<system-reminder>\nCLAUDE.md says hi")
    once = exchange(1, [user(reminder, text(task.PROMPT)), *TURNS[1:]])
    twice = exchange(2, [user(text(NOTICE), reminder, reminder, text(task.PROMPT))])
    assert checks.repeated_context([once, twice, twice]) == [
        "2 requests (from request 2) send pinned context twice: 1 blocks, e.g. "
        "'<system-reminder>\\nCLAUDE.md says hi'"]


def test_a_request_that_lost_a_system_message_of_its_conversation_is_reported():
    agent_types = {"role": "system", "content": "Available agent types"}
    first = exchange(1, [TURNS[0], agent_types, *TURNS[1:]], tools=("Bash", "WaitForMcpServers"))
    later = exchange(2, TURNS, tools=("Bash",))  # the agent's own tool list may shrink
    assert checks.lost_resident([first, later]) == {
        2: ["request 2 lost 1 instructions of the first request, e.g. 'Available agent types'"]}


def test_a_codex_request_whose_tools_and_instructions_left_its_input_is_reported():
    def responses(number, body):
        return Exchange(number, Recorded("POST", "/v1/responses", "", {},
                                         json.dumps(body).encode()), "responses", (), True, 0,
                        "call", body)
    first = codex_default_body(REASONING, EXEC, EXEC_OUT)
    later = {**first, "input": first["input"][2:]}
    assert checks.lost_resident([responses(1, first), responses(2, later)]) == {2: [
        "request 2 lost 1 tools of the first request, e.g. 'exec'",
        "request 2 lost 1 instructions of the first request, e.g. 'You are Codex'"]}


# --- the install script -------------------------------------------------------------------------


def fill_cache(cache, versions):
    for package, version in versions.items():
        folder = cache / "node_modules" / package
        folder.mkdir(parents=True)
        (folder / "package.json").write_text(json.dumps({"name": package, "version": version}))


def fake_npm(tmp_path):
    npm = tmp_path / "npm"
    log = tmp_path / "npm-args"
    npm.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    npm.chmod(npm.stat().st_mode | stat.S_IEXEC)
    return npm, log


def test_a_cache_that_holds_the_pinned_versions_installs_nothing(tmp_path, capsys):
    cache = tmp_path / "agents"
    fill_cache(cache, install_agents.PINS)
    npm, log = fake_npm(tmp_path)
    assert install_agents.install(cache, str(npm)) == 0
    assert not log.exists()
    assert "nothing installed" in capsys.readouterr().out


def test_a_wrong_version_is_installed_at_its_exact_pin_and_checked_afterwards(tmp_path):
    cache = tmp_path / "agents"
    fill_cache(cache, {**install_agents.PINS, "@openai/codex": "0.170.0"})
    npm, log = fake_npm(tmp_path)  # "installs" nothing, so the check afterwards fails
    assert install_agents.install(cache, str(npm)) == 1
    assert log.read_text().split() == ["install", "--prefix", str(cache), "--save-exact",
                                       "--no-audit", "--no-fund", "@openai/codex@0.171.0"]


# --- recovery in band ---------------------------------------------------------------------------


def test_once_paged_the_scripted_model_calls_the_offered_search_once_then_goes_on():
    provider = ScriptedProvider(recover=True)
    paged = [user(text(NOTICE), text(task.PROMPT)),
             {"role": "assistant", "content": [call("t3")]}, user(result("t3", task.step_file(3)))]
    body = messages_body(paged, tools=("Bash", "search_history"))
    reply = json.loads(provider.answer(Recorded("POST", "/v1/messages", "", {},
                                                json.dumps(body).encode())).body)
    (search,) = [b for b in reply["content"] if b["type"] == "tool_use"]
    assert search["name"] == "search_history"
    assert search["input"] == {"query": task.evicted_markers(1)[0]}
    # the proxy's follow-up, with the call and its result: the task goes on
    follow = messages_body([*paged, {"role": "assistant", "content": reply["content"]},
                            user(result(search["id"], "found it"))],
                           tools=("Bash", "search_history"))
    provider.answer(Recorded("POST", "/v1/messages", "", {}, json.dumps(follow).encode()))
    assert [e.answer for e in provider.exchanges] == ["recover", "call"]
    # without the offered tool, or without the notice, the model never calls it
    plain = ScriptedProvider(recover=True)
    for tools, messages in ((("Bash",), paged), (("Bash", "search_history"), TURNS)):
        raw = json.dumps(messages_body(messages, tools)).encode()
        plain.answer(Recorded("POST", "/v1/messages", "", {}, raw))
    assert [e.answer for e in plain.exchanges] == ["call", "call"]


def test_the_in_band_exchange_must_reach_the_follow_up_and_stay_in_place():
    marker = task.evicted_markers(1)[0]
    asked = [*TURNS, {"role": "assistant", "content": [
        text("looking"), {**call("s1", "search_history"), "input": {"query": marker}}]},
        user(result("s1", f"line 03: {marker}"))]
    recover = exchange(1, TURNS)
    recover = Exchange(1, recover.request, "anthropic", (), True, 2, "recover", recover.body)
    good = [recover, exchange(2, asked),
            exchange(3, [*asked, {"role": "assistant", "content": [call("t3")]},
                         user(result("t3"))])]
    assert checks.inband_problems(good, marker) == []
    lost = [*good[:2], exchange(3, [*TURNS, {"role": "assistant", "content": [call("t3")]},
                                    user(result("t3"))])]
    assert checks.inband_problems(lost, marker) == [
        "request 3 does not carry the hidden exchange in place"]
    assert "not once" in checks.inband_problems(good[1:], marker)[0]
