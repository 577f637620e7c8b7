"""An OpenAI-compatible chat-completions server on loopback that answers from a script.

The real LangChain/OpenAI client path runs against it. Script items:
- ``"text"`` or ``{"content": "text"}``: an answer;
- ``{"tool_calls": [{"name": "gpu_info", "arguments": {}}]}``: the model calls a tool;
- ``{"status": 429}`` (or 500, 401, ...): an HTTP error;
- ``{"refusal": "I can't help"}``: a refusal.
Every request body and its headers are kept in ``requests``.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeOpenAI:
    def __init__(self, script: list):
        self.script = list(script)
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                length = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                with fake._lock:
                    fake.requests.append(body)
                    fake.headers.append(dict(self.headers))
                    item = fake.script.pop(0) if fake.script else {"status": 500, "message": "script exhausted"}
                status, payload = fake._answer(item, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _answer(self, item, body: dict) -> tuple[int, dict]:
        if isinstance(item, str):
            item = {"content": item}
        if "status" in item:
            return item["status"], {"error": {"message": item.get("message", "scripted error"),
                                              "type": "scripted", "code": item["status"]}}
        message: dict = {"role": "assistant", "content": item.get("content")}
        if "refusal" in item:
            message.update(content=None, refusal=item["refusal"])
        if "tool_calls" in item:
            message["content"] = None
            message["tool_calls"] = [
                {"id": f"call_{i}", "type": "function",
                 "function": {"name": c["name"], "arguments": json.dumps(c.get("arguments", {}))}}
                for i, c in enumerate(item["tool_calls"])
            ]
        usage = item.get("usage", {"prompt_tokens": 1000, "completion_tokens": 400,
                                   "completion_tokens_details": {"reasoning_tokens": 100}})
        usage = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
            "model": body.get("model", "fake"),
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if "tool_calls" in item else "stop"}],
            "usage": usage,
        }
