"""A small local server that speaks the OpenAI chat-completions protocol with scripted replies.

It lets the tests drive the real client (langchain-openai over HTTP) with no network and no key.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class ScriptedServer:
    replies: list[str]
    status: int = 200
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    url: str = ""
    # Answered before any reply, one per request: (HTTP status, response headers), e.g. (429, {"Retry-After": "2"}).
    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    failed: int = 0

    def reply_for(self, body: dict[str, Any]) -> dict[str, Any]:
        index = len(self.requests) - 1 - self.failed
        text = self.replies[index] if index < len(self.replies) else self.replies[-1]
        prompt_tokens = sum(len(str(m.get("content", ""))) // 4 + 3 for m in body["messages"])
        return {
            "id": f"chatcmpl-{index}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(text.split()),
                "total_tokens": prompt_tokens + len(text.split()),
            },
        }


@contextmanager
def openai_compatible_server(
    replies: list[str], status: int = 200, failures: list[tuple[int, dict[str, str]]] | None = None
) -> Iterator[ScriptedServer]:
    """Serve ``replies`` in order on 127.0.0.1 (a free port) until the block ends; ``failures`` first."""
    script = ScriptedServer(replies=replies, status=status, failures=list(failures or []))

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            script.requests.append(body)
            script.headers.append(dict(self.headers))
            extra: dict[str, str] = {}
            if script.failed < len(script.failures):
                code, extra = script.failures[script.failed]
                script.failed += 1
                payload = json.dumps(
                    {"error": {"message": "scripted failure", "type": "rate_limit"}}
                ).encode()
                self.send_response(code)
            elif self.path.rstrip("/") != "/v1/chat/completions" or script.status != 200:
                payload = json.dumps(
                    {"error": {"message": "scripted failure", "type": "server_error"}}
                ).encode()
                self.send_response(script.status if script.status != 200 else 404)
            else:
                payload = json.dumps(script.reply_for(body)).encode()
                self.send_response(200)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    script.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield script
    finally:
        server.shutdown()
        server.server_close()
