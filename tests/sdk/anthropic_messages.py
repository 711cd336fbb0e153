"""The official Anthropic Python SDK, unchanged, against the relay's /v1/messages.

Run by `cargo xtask ci` with RELAY_BASE_URL and RELAY_KEY set, once with the SDK's 2.x (which
sends the key as a Bearer token) and once with an older 0.x (x-api-key). The relay serves
`sim-chat` (the built-in simulator) and `conv-chat` (an openai-chat channel in front of
tests/sdk/fake_openai_chat.py), so the SDK's own stream parser checks the conversion too.
Message batches run on both (`client.messages.batches`: create, retrieve, list, results,
cancel, delete). Prints one line per check and `anthropic-sdk: N passed, N failed`; exits non-zero on a failure.
"""

import os
import sys
import time
import traceback

import anthropic

PASSED = 0
FAILED = 0


def check(cond, what):
    global PASSED, FAILED
    if cond:
        PASSED += 1
        print(f"ok: {what}")
    else:
        FAILED += 1
        print(f"FAIL: {what}")


def run(what, fn):
    """Runs a group of checks; an exception fails the group instead of stopping the script."""
    global FAILED
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - report and carry on
        FAILED += 1
        print(f"FAIL: {what}: {type(e).__name__}: {e}")
        traceback.print_exc(limit=3)


def block_dicts(message):
    out = []
    for b in message.content:
        if b.type == "text":
            out.append({"type": "text", "text": b.text})
        elif b.type == "tool_use":
            out.append({"type": "tool_use", "id": b.id, "name": b.name, "input": b.input})
        else:
            out.append({"type": b.type})
    return out


TOOLS = [{"name": "get_weather", "description": "The weather in a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]


def main():
    client = anthropic.Anthropic(base_url=os.environ["RELAY_BASE_URL"], api_key=os.environ["RELAY_KEY"],
                                 max_retries=0)
    version = anthropic.__version__
    print(f"anthropic SDK {version}")

    def simulator():
        m = client.messages.create(model="sim-chat", max_tokens=64,
                                   messages=[{"role": "user", "content": "Hello there, relay!"}])
        check(m.id.startswith("msg_") and m.type == "message" and m.role == "assistant", "create returns a message")
        check(m.content[0].text == "You said Hello there relay", f"create text ({m.content[0].text!r})")
        check(m.stop_reason == "end_turn", "stop_reason end_turn")
        check(m.usage.output_tokens == 5 and m.usage.input_tokens > 0, f"usage counts ({m.usage})")

        m = client.messages.create(model="sim-chat", max_tokens=2,
                                   messages=[{"role": "user", "content": "one two three"}])
        check(m.stop_reason == "max_tokens" and m.usage.output_tokens == 2, "max_tokens stops the reply")

        m = client.messages.create(model="sim-chat", max_tokens=64, stop_sequences=["three"],
                                   messages=[{"role": "user", "content": "one two three four"}])
        check(m.stop_reason == "stop_sequence" and m.stop_sequence == "three", "a stop sequence stops the reply")

        with client.messages.stream(model="sim-chat", max_tokens=64,
                                    messages=[{"role": "user", "content": "stream these words please"}]) as s:
            text = "".join(s.text_stream)
            final = s.get_final_message()
        check(text == "You said stream these words please", f"messages.stream text_stream ({text!r})")
        check(final.stop_reason == "end_turn" and final.usage.output_tokens == 6, "stream's final message")

        with client.messages.stream(model="sim-chat", max_tokens=64, tools=TOOLS,
                                    tool_choice={"type": "tool", "name": "get_weather"},
                                    messages=[{"role": "user", "content": "Paris"}]) as s:
            final = s.get_final_message()
        tool = final.content[0]
        check(tool.type == "tool_use" and tool.name == "get_weather" and tool.input == {"city": "Paris"},
              f"a streamed tool call reassembled by the SDK ({tool})")
        check(final.stop_reason == "tool_use", "stop_reason tool_use")

        count = client.messages.count_tokens(model="sim-chat",
                                             messages=[{"role": "user", "content": "Hello, world!"}])
        check(count.input_tokens == 7, f"count_tokens ({count.input_tokens})")

        models = [m.id for m in client.models.list()]
        check("sim-chat" in models and "conv-chat" in models, f"models.list ({models})")

    def errors():
        try:
            client.messages.create(model="sim-chat", max_tokens=0, messages=[{"role": "user", "content": "x"}])
            check(False, "max_tokens 0 is refused")
        except anthropic.BadRequestError as e:
            check(e.status_code == 400 and "max_tokens" in str(e), f"max_tokens 0 is a BadRequestError ({e})")
        try:
            client.messages.create(model="sim-chat", max_tokens=5, extra_body={"temperature": 1.5},
                                   messages=[{"role": "user", "content": "x"}])
            check(False, "temperature 1.5 is refused")
        except anthropic.BadRequestError as e:
            check("temperature" in str(e), "temperature 1.5 is a BadRequestError")
        bad = anthropic.Anthropic(base_url=os.environ["RELAY_BASE_URL"], api_key="sk-relay-wrong", max_retries=0)
        try:
            bad.messages.create(model="sim-chat", max_tokens=5, messages=[{"role": "user", "content": "x"}])
            check(False, "a wrong key is refused")
        except anthropic.AuthenticationError as e:
            check(e.status_code == 401, "a wrong key is an AuthenticationError")

    def conversion():
        cases = [
            ("text", {"messages": [{"role": "user", "content": "hello there"}]},
             [{"type": "text", "text": "Echo hello there"}], "end_turn", None),
            ("system", {"system": "be brief", "messages": [{"role": "user", "content": "hi"}]},
             [{"type": "text", "text": "[be brief] Echo hi"}], "end_turn", None),
            ("multi-turn", {"messages": [{"role": "user", "content": "first"},
                                         {"role": "assistant", "content": "reply"},
                                         {"role": "user", "content": "second turn"}]},
             [{"type": "text", "text": "Echo second turn"}], "end_turn", None),
            ("tool call", {"tools": TOOLS, "tool_choice": {"type": "any"},
                           "messages": [{"role": "user", "content": "weather in Paris?"}]},
             [{"type": "tool_use", "id": "call_fake_1", "name": "get_weather", "input": {"city": "Paris"}}],
             "tool_use", None),
            ("tool result", {"tools": TOOLS, "messages": [
                {"role": "user", "content": "weather in Paris?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_fake_1", "name": "get_weather",
                                                   "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_fake_1",
                                              "content": "sunny 21C"}]}]},
             [{"type": "text", "text": "The tool said sunny 21C"}], "end_turn", None),
            ("stop sequence", {"stop_sequences": ["STOP"], "messages": [{"role": "user", "content": "go on STOP x"}]},
             [{"type": "text", "text": "Echo go on "}], "stop_sequence", "STOP"),
            ("max_tokens", {"max_tokens": 3, "messages": [{"role": "user", "content": "a b c d e"}]},
             [{"type": "text", "text": "Echo a b"}], "max_tokens", None),
        ]
        for name, params, content, stop_reason, stop_sequence in cases:
            params = dict(params)
            params.setdefault("max_tokens", 100)
            m = client.messages.create(model="conv-chat", **params)
            check(block_dicts(m) == content and m.stop_reason == stop_reason and m.stop_sequence == stop_sequence,
                  f"conversion {name}: create ({block_dicts(m)}, {m.stop_reason})")
            with client.messages.stream(model="conv-chat", **params) as s:
                final = s.get_final_message()
            check(block_dicts(final) == content and final.stop_reason == stop_reason
                  and final.stop_sequence == stop_sequence
                  and final.usage.output_tokens == m.usage.output_tokens,
                  f"conversion {name}: stream parsed by the SDK ({block_dicts(final)}, {final.stop_reason})")

    def wait_ended(batch_id):
        deadline = time.monotonic() + 30
        while True:
            b = client.messages.batches.retrieve(batch_id)
            if b.processing_status == "ended" or time.monotonic() > deadline:
                return b
            time.sleep(0.05)

    def batches():
        def ask(custom_id, model, text):
            return {"custom_id": custom_id,
                    "params": {"model": model, "max_tokens": 64, "messages": [{"role": "user", "content": text}]}}

        b = client.messages.batches.create(requests=[ask("first", "sim-chat", "Hello batch"),
                                                     ask("second", "conv-chat", "hello there")])
        check(b.id.startswith("msgbatch_") and b.type == "message_batch"
              and b.request_counts.processing + b.request_counts.succeeded == 2 and b.created_at is not None,
              f"batches.create ({b.processing_status}, {b.request_counts})")
        b = wait_ended(b.id)
        check(b.processing_status == "ended" and b.request_counts.succeeded == 2 and b.ended_at is not None
              and b.results_url.endswith(f"/v1/messages/batches/{b.id}/results"),
              f"batches.retrieve until ended ({b.processing_status}, {b.request_counts}, {b.results_url})")
        results = list(client.messages.batches.results(b.id))
        check([r.custom_id for r in results] == ["first", "second"], "batches.results: one line per request")
        texts = [r.result.message.content[0].text if r.result.type == "succeeded" else r.result.type
                 for r in results]
        check(texts == ["You said Hello batch", "Echo hello there"], f"batches.results: the messages ({texts})")

        page = client.messages.batches.list(limit=1)
        check(len(page.data) == 1 and page.data[0].id == b.id, "batches.list: newest first")
        every = [x.id for x in client.messages.batches.list(limit=1)]
        check(b.id in every and len(every) == len(set(every)), f"batches.list pages ({len(every)} batches)")

        c = client.messages.batches.create(requests=[ask(f"c{i}", "sim-chat", f"number {i}") for i in range(20)])
        c = client.messages.batches.cancel(c.id)
        check(c.processing_status in ("canceling", "ended") and c.cancel_initiated_at is not None,
              f"batches.cancel ({c.processing_status})")
        c = wait_ended(c.id)
        counts = c.request_counts
        check(c.processing_status == "ended" and counts.succeeded + counts.canceled == 20,
              f"a canceled batch ends ({counts})")
        kinds = {r.result.type for r in client.messages.batches.results(c.id)}
        check(kinds <= {"succeeded", "canceled"}, f"canceled results ({kinds})")

        d = client.messages.batches.delete(b.id)
        check(d.id == b.id and d.type == "message_batch_deleted", "batches.delete")
        try:
            client.messages.batches.retrieve(b.id)
            check(False, "a deleted batch is gone")
        except anthropic.NotFoundError as e:
            check(e.status_code == 404, "a deleted batch is a NotFoundError")
        try:
            client.messages.batches.create(requests=[{"custom_id": "x", "params": {
                "model": "sim-chat", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}}])
            check(False, "a bad request in a batch is refused")
        except anthropic.BadRequestError as e:
            check("requests[0].params.max_tokens" in str(e), f"a bad request names its field ({e})")

    run("simulator", simulator)
    run("errors", errors)
    run("conversion", conversion)
    run("batches", batches)
    print(f"anthropic-sdk: {PASSED} passed, {FAILED} failed")
    sys.exit(1 if FAILED else 0)


if __name__ == "__main__":
    main()
