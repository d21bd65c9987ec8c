#!/usr/bin/env python3
"""An OpenAI-compatible chat-completions stand-in on loopback, for CI to run the README's
LLM program against: `openai_stand_in.py PORT ok|fail NAME`. `ok` answers every POST with a
chat completion naming NAME; `fail` answers 503. With PORT 0 it takes a free port. It prints
the port it listens on, then runs until killed."""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT, MODE, NAME = int(sys.argv[1]), sys.argv[2], sys.argv[3]


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if MODE == "ok":
            status = 200
            body = {"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": f"42 (from {NAME})"}}]}
        else:
            status, body = 503, {"error": {"message": "overloaded", "code": "server_error"}}
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
