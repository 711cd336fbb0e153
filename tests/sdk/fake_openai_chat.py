"""A fake OpenAI-compatible chat completions server for the SDK check (standard library only).

It prints `listening http://127.0.0.1:PORT` and then answers POST /v1/chat/completions,
streamed and not, deterministically:

- a request whose tool_choice is "required" or names a function (and whose last message is
  not a tool result) gets one tool call with arguments {"city": "Paris"};
- after a tool result: "The tool said <the result>";
- otherwise "[<system prompt>] Echo <the last user message>" (without the bracket part when
  there is no system prompt);
- max_tokens cuts the reply after that many words (finish_reason "length"); a stop string cuts
  it before the string (finish_reason "stop", and "stop_reason" naming the string, as vLLM does).
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def words_of(content):
    if isinstance(content, str):
        return content.split()
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict)).split()
    return []


def reply(req):
    messages = req.get("messages", [])
    prompt_tokens = sum(len(words_of(m.get("content"))) + 3 for m in messages)
    last = messages[-1] if messages else {}
    choice = req.get("tool_choice")
    named = choice.get("function", {}).get("name") if isinstance(choice, dict) else None
    if (named or choice == "required") and last.get("role") != "tool":
        name = named or req["tools"][0]["function"]["name"]
        return {"text": "", "calls": [("call_fake_1", name, '{"city": "Paris"}')], "finish": "tool_calls",
                "matched": None, "prompt": prompt_tokens, "completion": 5}
    if last.get("role") == "tool":
        said = "The tool said " + " ".join(words_of(last.get("content")))
    else:
        system = next((m for m in messages if m.get("role") == "system"), None)
        prefix = "[" + " ".join(words_of(system["content"])) + "] " if system else ""
        said = prefix + "Echo " + " ".join(words_of(last.get("content")))
    words = said.split(" ")
    finish = "stop"
    max_tokens = req.get("max_tokens")
    if isinstance(max_tokens, int) and len(words) > max_tokens:
        words = words[:max_tokens]
        finish = "length"
    text = " ".join(words)
    matched = None
    for stop in req.get("stop") or []:
        at = text.find(stop)
        if at >= 0:
            text = text[:at]
            finish = "stop"
            matched = stop
    return {"text": text, "calls": [], "finish": finish, "matched": matched, "prompt": prompt_tokens,
            "completion": len(text.split())}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        req = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions":
            self.send_response(404)
            self.send_header("content-length", "0")
            self.end_headers()
            return
        r = reply(req)
        if req.get("stream"):
            self.stream(req, r)
        else:
            message = {"role": "assistant", "content": r["text"] or None}
            if r["calls"]:
                message["tool_calls"] = [{"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                                         for i, n, a in r["calls"]]
            body = json.dumps({"id": "chatcmpl-1", "object": "chat.completion", "model": req.get("model"),
                               "choices": [{"index": 0, "message": message, "finish_reason": r["finish"],
                                            "stop_reason": r["matched"]}],
                               "usage": {"prompt_tokens": r["prompt"], "completion_tokens": r["completion"]}}).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    def stream(self, req, r):
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def send(obj):
            data = ("data: " + (obj if isinstance(obj, str) else json.dumps(obj)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def chunk(delta, finish=None, **extra):
            choice = {"index": 0, "delta": delta, "finish_reason": finish}
            choice.update(extra)
            return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": req.get("model"), "choices": [choice]}

        send(chunk({"role": "assistant", "content": ""}))
        if r["text"]:
            pieces = r["text"].split(" ")
            for i, word in enumerate(pieces):
                send(chunk({"content": word + (" " if i < len(pieces) - 1 else "")}))
        for i, (call_id, name, args) in enumerate(r["calls"]):
            send(chunk({"tool_calls": [{"index": i, "id": call_id, "type": "function",
                                        "function": {"name": name, "arguments": ""}}]}))
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                send(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}))
        send(chunk({}, r["finish"], stop_reason=r["matched"]))
        if (req.get("stream_options") or {}).get("include_usage"):
            send({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [],
                  "usage": {"prompt_tokens": r["prompt"], "completion_tokens": r["completion"]}})
        send("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"listening http://127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
