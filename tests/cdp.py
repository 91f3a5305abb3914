"""A small driver for headless Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe):
JSON messages separated by NUL bytes on fds 3 (commands) and 4 (answers and events). No websocket
library and no port: the browser is this test's child and talks only to it.

Enough to drive a page as a user would: open a URL, evaluate JavaScript, click and drag with real
mouse events (Input.dispatchMouseEvent), type keys, take screenshots."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import subprocess
import time
from pathlib import Path

from .screenshots import CHROMIUM_FLAGS, chromium


class Browser:
    def __init__(self, profile_dir: Path, width: int = 1400, height: int = 900) -> None:
        self.width, self.height = width, height
        self.errors: list[str] = []
        # A browser that dies as it starts (seen once in a full suite on a machine set up from
        # scratch: the pipe broken before the first answer) is started once more; its own log says
        # why if the second start fails too.
        for attempt in (1, 2):
            try:
                self._launch(profile_dir, attempt)
                return
            except (BrokenPipeError, AssertionError) as e:
                self._stop_child()
                if attempt == 2:
                    raise AssertionError(f"Chromium did not start: {e}; its log ends: {self._log_tail()}") from e

    def _launch(self, profile_dir: Path, attempt: int) -> None:
        width, height = self.width, self.height
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The child reads commands on fd 3 and writes answers to fd 4: moved there in the child
        # (through fds above 9 first, so that neither end is overwritten by the other's move).
        def fds() -> None:
            r, w = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(r, 3)
            os.dup2(w, 4)
        self._log = profile_dir.parent / f"{profile_dir.name}-chromium-{attempt}.log"
        with open(self._log, "wb") as log:
            self.proc = subprocess.Popen(
                [str(chromium()), *CHROMIUM_FLAGS, "--remote-debugging-pipe", f"--user-data-dir={profile_dir}-{attempt}",
                 f"--window-size={width},{height}", "about:blank"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log,
                preexec_fn=fds, pass_fds=(3, 4, to_child_r, from_child_w))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._id = 0
        self.session = ""
        target = self.send("Target.createTarget", url="about:blank", session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", targetId=target, flatten=True, session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1, mobile=False)

    def _stop_child(self, grace: float = 0) -> None:
        """Wait `grace` seconds for the browser to exit, then kill it; close our ends of its pipes."""
        try:
            self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass

    def _log_tail(self) -> str:
        try:
            return self._log.read_text(errors="replace")[-800:]
        except OSError:
            return "(no log)"

    # -- protocol -----------------------------------------------------------------------------
    def send(self, method: str, session: bool = True, timeout: float = 60, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("method") == "Runtime.exceptionThrown":
                self.errors.append(json.dumps(reply["params"]["exceptionDetails"])[:2000])
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise AssertionError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def _read(self, deadline: float) -> dict:
        while b"\0" not in self._buffer:
            if time.monotonic() > deadline:
                raise AssertionError("Chromium did not answer in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise AssertionError("Chromium closed its pipe")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    # -- what a test does ---------------------------------------------------------------------
    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait_for("document.readyState === 'complete'")

    def js(self, expression: str):
        r = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30):
        deadline = time.monotonic() + timeout
        while True:
            value = self.js(expression)
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"never true: {expression}")
            time.sleep(0.05)

    def center(self, selector: str) -> tuple[float, float]:
        box = self.js(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                      f" return [r.x + r.width / 2, r.y + r.height / 2]; }})()")
        return box[0], box[1]

    def mouse(self, kind: str, x: float, y: float, buttons: int = 0, **kw) -> None:
        self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left" if kind != "mouseMoved" or buttons
                  else "none", buttons=buttons, clickCount=1 if kind != "mouseMoved" else 0, **kw)

    def click(self, x: float, y: float) -> None:
        self.mouse("mouseMoved", x, y)
        self.mouse("mousePressed", x, y, buttons=1)
        self.mouse("mouseReleased", x, y)

    def click_on(self, selector: str) -> None:
        self.click(*self.center(selector))

    def drag(self, x0: float, y0: float, x1: float, y1: float, steps: int = 8) -> None:
        self.mouse("mouseMoved", x0, y0)
        self.mouse("mousePressed", x0, y0, buttons=1)
        for i in range(1, steps + 1):
            self.mouse("mouseMoved", x0 + (x1 - x0) * i / steps, y0 + (y1 - y0) * i / steps, buttons=1)
        self.mouse("mouseReleased", x1, y1)

    def type(self, text: str) -> None:
        for ch in text:
            self.send("Input.dispatchKeyEvent", type="keyDown", text=ch, key=ch)
            self.send("Input.dispatchKeyEvent", type="keyUp", key=ch)

    def key(self, key: str, code: int) -> None:
        self.send("Input.dispatchKeyEvent", type="rawKeyDown", key=key, windowsVirtualKeyCode=code)
        self.send("Input.dispatchKeyEvent", type="keyUp", key=key, windowsVirtualKeyCode=code)

    def screenshot(self, out: Path) -> Path:
        data = self.send("Page.captureScreenshot", format="png")["data"]
        out.write_bytes(base64.b64decode(data))
        return out

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False, timeout=10)
        except (AssertionError, OSError):
            pass
        self._stop_child(grace=10)
