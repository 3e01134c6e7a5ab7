"""A real HTTP server process speaking the OpenAI chat-completions protocol with scripted
replies and scripted faults, for testing rasfast.llm.OpenAIChat and the RAS loop over HTTP.

Run: ``python tests/fake_openai_server.py [--api-key KEY]``; it binds 127.0.0.1 on a free
port and prints ``PORT <n>`` on stdout. Endpoints:

- ``POST /v1/chat/completions``: the protocol. A rule matches when all its ``contains``
  strings occur in the joined message contents and all its ``last_contains`` strings in the
  last user message (first match wins); a rule replies with ``reply`` (or echoes the last
  user message with ``"echo": true``), after its ``fault`` has fired ``times`` times (default:
  always); a rule with a fault and no reply falls through to later rules once its faults are
  used up. ``"close": true`` on a rule makes the server hang up right after sending its reply
  (no ``Connection: close`` header: a kept-alive client finds out on its next request).
  Faults: ``{"kind": "500"|"503"|"429"|"400"|"malformed"|"truncated"|"slow"|"drop",
  "times": n, "retry_after": seconds, "delay": seconds}``. ``stop`` strings cut the reply
  the way real servers do. Without a matching rule the ``default`` reply is sent.
- ``POST /_rules`` ``{"rules": [...], "default": str}``: replace the script, reset counters.
- ``GET /_stats``: request count, per-rule hit counts, the last requests' bodies, and
  ``connections``: how many TCP connections carried chat requests (the server speaks
  HTTP/1.1 keep-alive, so a client that reuses connections opens fewer than it sends).
"""
from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STATE = {"rules": [], "default": "OK", "hits": [], "requests": 0, "log": [], "connections": 0, "epoch": 0}
LOCK = threading.Lock()
API_KEY = None


def _matches(rule, text, last_user):
    def all_in(key, hay):
        needles = rule.get(key, [])
        needles = [needles] if isinstance(needles, str) else needles
        return all(n in hay for n in needles)
    return all_in("contains", text) and all_in("last_contains", last_user)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every reply has a Content-Length
    # headers and body go out in two writes: without TCP_NODELAY, Nagle holds the body back
    # until the client's delayed ACK (~40 ms per reply on a kept-alive connection)
    disable_nagle_algorithm = True
    counted = -1  # the script epoch in which this connection last carried a chat request

    def log_message(self, *args):  # keep test output clean
        pass

    def _json(self, code, obj, headers=None):
        data = json.dumps(obj).encode()
        self._raw(code, data, headers)

    def _raw(self, code, data, headers=None):
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/_stats":
            with LOCK:
                self._json(200, {"requests": STATE["requests"], "hits": list(STATE["hits"]),
                                 "log": STATE["log"][-5000:], "connections": STATE["connections"]})
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path == "/_rules":
            cfg = json.loads(raw)
            with LOCK:
                STATE["rules"] = cfg.get("rules", [])
                STATE["default"] = cfg.get("default", "OK")
                STATE["hits"] = [0] * len(STATE["rules"])
                STATE["requests"] = 0
                STATE["log"] = []
                STATE["connections"] = 0
                STATE["epoch"] += 1
            return self._json(200, {"ok": True})
        if self.path != "/v1/chat/completions":
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        if API_KEY and self.headers.get("Authorization") != f"Bearer {API_KEY}":
            return self._json(401, {"error": {"message": "invalid api key"}})
        try:
            body = json.loads(raw)
            messages = body["messages"]
            model = body["model"]
            text = "\n".join(m["content"] for m in messages)
            users = [m["content"] for m in messages if m["role"] == "user"]
            last_user = users[-1] if users else ""
        except (ValueError, KeyError, TypeError) as e:
            return self._json(400, {"error": {"message": f"bad request: {e}"}})
        with LOCK:
            STATE["requests"] += 1
            STATE["log"].append(body)
            if self.counted != STATE["epoch"]:
                self.counted = STATE["epoch"]
                STATE["connections"] += 1
            rule, fault = None, None
            for i, r in enumerate(STATE["rules"]):
                if not _matches(r, text, last_user):
                    continue
                STATE["hits"][i] += 1
                f = r.get("fault")
                if f and STATE["hits"][i] <= f.get("times", 1 << 30):
                    rule, fault = r, f
                    break
                if "reply" in r or r.get("echo"):
                    rule = r
                    break
                # a fault-only rule whose faults are used up: fall through to the next rules
        if fault:
            kind = str(fault.get("kind"))
            if kind == "slow":
                time.sleep(float(fault.get("delay", 5.0)))
            elif kind == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
                return
            elif kind == "truncated":  # promises more body than it sends, then hangs up
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "1000")
                self.end_headers()
                self.wfile.write(b'{"choices": [')
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
                return
            elif kind == "malformed":
                return self._raw(200, b'{"choices": [ {"message": ')
            elif kind == "429":
                return self._json(429, {"error": {"message": "rate limited"}},
                                  {"Retry-After": str(fault.get("retry_after", 0))})
            else:
                return self._json(int(kind), {"error": {"message": f"scripted {kind}"}})
        if rule is None:
            reply = STATE["default"]
        elif rule.get("echo"):
            reply = last_user
        else:
            reply = rule.get("reply", "")
        for s in body.get("stop") or []:
            if s in reply:
                reply = reply[:reply.index(s)]
        if rule is not None and rule.get("close"):
            self.close_connection = True  # after this reply, without telling the client
        self._json(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                         "model": model,
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": reply}}],
                         "usage": {"prompt_tokens": len(text.split()), "completion_tokens": len(reply.split()),
                                   "total_tokens": len(text.split()) + len(reply.split())}})


class FakeServer:
    """Starts this file as a subprocess (test side); ``url`` is the ``/v1`` base URL."""

    def __init__(self, api_key=None, startup_timeout=20.0):
        import subprocess
        cmd = [sys.executable, __file__] + (["--api-key", api_key] if api_key else [])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = [None]
        reader = threading.Thread(target=lambda: line.__setitem__(0, self.proc.stdout.readline()), daemon=True)
        reader.start()
        reader.join(startup_timeout)
        if not line[0] or not line[0].startswith("PORT "):
            self.close()
            raise RuntimeError(f"fake OpenAI server did not start: {line[0]!r}")
        self.port = int(line[0].split()[1])
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = self.root + "/v1"

    def _call(self, path, obj=None):
        import urllib.request
        data = None if obj is None else json.dumps(obj).encode()
        req = urllib.request.Request(self.root + path, data=data, method="GET" if obj is None else "POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read())

    def script(self, rules=(), default="OK"):
        """Replace the scripted rules (and reset the counters)."""
        return self._call("/_rules", {"rules": list(rules), "default": default})

    def stats(self):
        return self._call("/_stats")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except Exception:
                self.proc.kill()
                self.proc.wait(5)
        for f in (self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


def main():
    global API_KEY
    ap = argparse.ArgumentParser()
    ap.add_argument("--api-key", default=None)
    args = ap.parse_args()
    API_KEY = args.api_key
    # a listen backlog like real servers' (socketserver's default of 5 drops the SYNs of a
    # burst of concurrent clients, which then wait ~1 s for the TCP retransmit)
    ThreadingHTTPServer.request_queue_size = 256
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
