#!/usr/bin/env python3
"""Open a local HTML file in headless Chromium and report what a user would see: console
errors, uncaught exceptions, network requests, the value of a JavaScript expression, and a
screenshot. Drives the browser through the DevTools protocol over a pipe
(``--remote-debugging-pipe``), so it needs Chromium and nothing else: no driver, no
websocket package, no server.

    python tools/headless_chromium.py report.html --shot report.png [--width 1200 --height 900]
        [--eval "document.querySelectorAll('svg').length"]

``find_chromium()`` looks for the browser; ``ensure_chromium()`` installs Debian's
``chromium`` package with apt-get when it is missing and we are root or have password-less
sudo (the browser tests' setup).
"""
from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import pathlib
import select
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> Optional[str]:
    for n in NAMES:
        p = shutil.which(n)
        if p:
            return p
    return None


def ensure_chromium(timeout: float = 900) -> Tuple[Optional[str], str]:
    """(path, "") when Chromium is there or was installed; (None, why not) otherwise."""
    p = find_chromium()
    if p:
        return p, ""
    if not shutil.which("apt-get"):
        return None, "Chromium is not installed and there is no apt-get to install it with"
    sudo: List[str] = []
    if os.geteuid() != 0:
        if not (shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0):
            return None, "Chromium is not installed and installing it needs root (apt-get install chromium)"
        sudo = ["sudo", "-n", "env", "DEBIAN_FRONTEND=noninteractive"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    for cmd in (sudo + ["apt-get", "update", "-q"],
                sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", "chromium"]):
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, f"{' '.join(cmd)} took more than {timeout:.0f} s"
        if r.returncode != 0:
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
            return None, f"{' '.join(cmd)} failed: {tail[0]}"
    p = find_chromium()
    return (p, "") if p else (None, "apt-get installed chromium but no browser binary is on PATH")


@dataclass
class PageResult:
    """What loading one page gave."""
    console: List[Dict[str, Any]] = field(default_factory=list)    # {"level", "text"} of every message
    exceptions: List[str] = field(default_factory=list)            # uncaught exceptions
    requests: List[str] = field(default_factory=list)              # URLs the page asked for
    values: Dict[str, Any] = field(default_factory=dict)           # expression -> its value
    screenshot: Optional[bytes] = None

    @property
    def errors(self) -> List[str]:
        """Console messages at error level and uncaught exceptions."""
        return [m["text"] for m in self.console if m["level"] in ("error", "assert")] + self.exceptions


class _Pipe:
    """The DevTools protocol over Chromium's fds 3 (commands in) and 4 (replies out):
    JSON messages, each ended by a NUL byte."""

    def __init__(self, proc: subprocess.Popen, to_browser: int, from_browser: int):
        self.proc, self.wfd, self.rfd = proc, to_browser, from_browser
        self.buf, self.next_id, self.events = b"", 0, []

    def send(self, method: str, params: Optional[dict] = None, session: Optional[str] = None,
             timeout: float = 60) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.wfd, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read(deadline)
            if m.get("id") == self.next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error'].get('message')}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        for i, m in enumerate(self.events):
            if m.get("method") == method:
                return self.events.pop(i)
        while True:
            m = self._read(deadline)
            if m.get("method") == method:
                return m
            self.events.append(m)

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("Chromium did not answer in time")
            ready, _, _ = select.select([self.rfd], [], [], left)
            if ready:
                chunk = os.read(self.rfd, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"Chromium closed the pipe (exit code {self.proc.poll()})")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        return json.loads(raw)


def open_page(path: os.PathLike, *, expressions: Tuple[str, ...] = (), screenshot: bool = True,
              width: int = 1200, height: int = 900, full_page: bool = False,
              chromium: Optional[str] = None, timeout: float = 120) -> PageResult:
    """Loads ``path`` (a local file) in a fresh headless Chromium, waits for its load event,
    evaluates ``expressions`` and takes a screenshot (PNG bytes)."""
    exe = chromium or find_chromium()
    if not exe:
        raise FileNotFoundError("Chromium not found (apt-get install chromium)")
    url = pathlib.Path(path).resolve().as_uri()
    profile = tempfile.mkdtemp(prefix="rasfast-chromium-")
    to_r, to_w = os.pipe()          # our commands -> Chromium's fd 3
    from_r, from_w = os.pipe()      # Chromium's fd 4 -> us
    args = [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--no-first-run", "--no-default-browser-check", "--disable-extensions",
            "--remote-debugging-pipe", f"--user-data-dir={profile}", "about:blank"]

    def child_fds():
        # copies above 10 first, so neither end is overwritten by the other's dup2; fds made
        # by dup2 survive exec, and Python's own pipes are close-on-exec, so close_fds=False
        # leaks nothing else (with close_fds=True, Popen would close 3 and 4 after this runs)
        a, b = fcntl.fcntl(to_r, fcntl.F_DUPFD_CLOEXEC, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD_CLOEXEC, 10)
        os.dup2(a, 3)
        os.dup2(b, 4)
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            close_fds=False, preexec_fn=child_fds)
    os.close(to_r)
    os.close(from_w)
    pipe = _Pipe(proc, to_w, from_r)
    out = PageResult()
    try:
        target = pipe.send("Target.createTarget", {"url": "about:blank"}, timeout=timeout)["targetId"]
        session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            pipe.send(f"{domain}.enable", session=session)
        pipe.send("Emulation.setDeviceMetricsOverride", {"width": width, "height": height,
                                                          "deviceScaleFactor": 1, "mobile": False}, session)
        pipe.send("Page.navigate", {"url": url}, session, timeout=timeout)
        pipe.wait_event("Page.loadEventFired", timeout=timeout)
        for expr in expressions:
            r = pipe.send("Runtime.evaluate", {"expression": expr, "returnByValue": True}, session)
            if "exceptionDetails" in r:
                out.values[expr] = RuntimeError(r["exceptionDetails"].get("text", "exception"))
            else:
                out.values[expr] = r.get("result", {}).get("value")
        if screenshot:
            params: Dict[str, Any] = {"format": "png"}
            if full_page:
                params["captureBeyondViewport"] = True
                m = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
                params["clip"] = {"x": 0, "y": 0, "width": m["width"], "height": m["height"], "scale": 1}
            out.screenshot = base64.b64decode(pipe.send("Page.captureScreenshot", params, session,
                                                        timeout=timeout)["data"])
        pipe.send("Runtime.evaluate", {"expression": "1"}, session)   # flush pending events
        for m in pipe.events:
            meth, p = m.get("method"), m.get("params", {})
            if meth == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                out.console.append({"level": "error" if p.get("type") == "error" else p.get("type"), "text": text})
            elif meth == "Log.entryAdded":
                e = p.get("entry", {})
                out.console.append({"level": e.get("level"), "text": e.get("text", "")})
            elif meth == "Runtime.exceptionThrown":
                d = p.get("exceptionDetails", {})
                out.exceptions.append(d.get("exception", {}).get("description") or d.get("text", "exception"))
            elif meth == "Network.requestWillBeSent":
                out.requests.append(p.get("request", {}).get("url", ""))
        try:
            pipe.send("Browser.close", timeout=10)
        except (RuntimeError, TimeoutError):
            pass
    finally:
        os.close(to_w)
        os.close(from_r)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("html")
    ap.add_argument("--shot", default=None, help="write the screenshot (PNG) here")
    ap.add_argument("--width", type=int, default=1200)
    ap.add_argument("--height", type=int, default=900)
    ap.add_argument("--full-page", action="store_true")
    ap.add_argument("--eval", action="append", default=[], help="a JavaScript expression to print")
    a = ap.parse_args(argv)
    if not pathlib.Path(a.html).is_file():
        print(f"headless_chromium: no such file: {a.html}", file=sys.stderr)
        return 1
    r = open_page(a.html, expressions=tuple(a.eval), screenshot=bool(a.shot), width=a.width, height=a.height,
                  full_page=a.full_page)
    for e in r.errors:
        print(f"console error: {e}")
    for u in r.requests:
        if u != pathlib.Path(a.html).resolve().as_uri():
            print(f"request: {u}")
    for k, v in r.values.items():
        print(f"{k} = {v!r}")
    if a.shot:
        pathlib.Path(a.shot).write_bytes(r.screenshot)
        print(f"screenshot: {a.shot} ({len(r.screenshot)} bytes)")
    return 1 if r.errors else 0


if __name__ == "__main__":
    sys.exit(main())
