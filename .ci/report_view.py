"""Open a Snakemake report in headless Chromium and check, as a reader sees it, each study's table and figure.

usage: python .ci/report_view.py report.html STUDY [STUDY ...]

Chromium is driven over its DevTools pipe (--remote-debugging-pipe: fd 3 in, fd 4 out, JSON messages ending in a
NUL byte), with the standard library (and Pillow, which matplotlib
brings, to read the screenshots). For each study the report's result buttons are followed as a click
does (``app.setView`` with the result's data URI): the table's text is read from the rendered frame (the
rate(e_s) and e_lambda headers), the figure's <img> must have decoded (naturalWidth > 0), and a screenshot of each
view (the frame or the image, not the menu) must not be blank. Prints one line per check; exits 1 on the first failure.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
]


class Browser:
    def __init__(self, binary: str, profile: str):
        to_chrome, self._w = os.pipe()
        self._r, from_chrome = os.pipe()

        def fds():  # the pipe's ends moved out of the way first: either may be fd 3 or 4 already
            a, b = fcntl.fcntl(to_chrome, fcntl.F_DUPFD, 10), fcntl.fcntl(from_chrome, fcntl.F_DUPFD, 10)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"],
            preexec_fn=fds,
            close_fds=False,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # chromium and its helpers in a process group of their own: stopped together
        )
        os.close(to_chrome)
        os.close(from_chrome)
        self._buf = b""
        self._id = 0
        self.session = None

    def _read(self) -> dict:
        while b"\0" not in self._buf:
            chunk = os.read(self._r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed its DevTools pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, **params) -> dict:
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def evaluate(self, js: str, context: int | None = None):
        params = {"expression": js, "returnByValue": True, "awaitPromise": True}
        if context is not None:
            params["contextId"] = context
        out = self.call("Runtime.evaluate", **params)
        if "exceptionDetails" in out:
            raise RuntimeError(f"{js[:80]}...: {out['exceptionDetails'].get('exception', {}).get('description')}")
        return out["result"].get("value")

    def wait(self, js: str, timeout: float = 20.0, context: int | None = None):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = self.evaluate(js, context)
            if value:
                return value
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {js}")

    def close(self):
        """Ask chromium to quit (it flushes its profile), then stop its whole process group by its pid and wait
        until no process of the group is left: its helpers write into the profile folder until they exit."""
        try:
            self.call("Browser.close")
            self.proc.wait(timeout=10)
        except (OSError, RuntimeError, subprocess.TimeoutExpired):
            pass
        group = self.proc.pid  # the group's id: start_new_session made chromium its leader
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            try:
                os.killpg(group, 0)  # any member left?
            except ProcessLookupError:
                return
            time.sleep(0.1)


def not_blank(png: bytes) -> float:
    """The fraction of the screenshot's pixels that differ from its most common colour."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("L")
    hist = img.histogram()
    return 1.0 - max(hist) / sum(hist)


def check(report: str, studies: list[str], binary: str = "chromium") -> None:
    with tempfile.TemporaryDirectory() as profile:
        b = Browser(binary, profile)
        try:
            page = next(t for t in b.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
            b.session = b.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
            b.call("Page.enable")
            b.call("Page.navigate", url="file://" + os.path.abspath(report))
            b.wait("typeof results !== 'undefined' && document.readyState === 'complete'")
            for study in studies:
                for output, kind in (("table", "html"), ("figure", "img")):
                    found = b.evaluate(
                        "Object.entries(results).filter(([p, r]) => r.labels && r.labels.study === "
                        f"{json.dumps(study)} && r.labels.output === {json.dumps(output)}).map(([p]) => p)"
                    )
                    if len(found) != 1:
                        raise RuntimeError(f"{study}: {len(found)} {output} entries in the report")
                    path = json.dumps(found[0])
                    view = f"{{content: '{kind}', contentPath: results[{path}].data_uri}}"
                    b.wait(f"typeof app !== 'undefined' && app ? (app.setView({view}), true) : false")
                    if kind == "html":
                        text = _frame_text(b)
                        for want in ("rate(e_s)", "e_lambda"):
                            if want not in text:
                                raise RuntimeError(f"{study}: the table's frame does not show {want!r}")
                        detail = f"{len(text)} characters, e.g. {text.splitlines()[0][:60]!r}"
                    else:
                        img = f"[...document.images].find(i => i.src === results[{path}].data_uri)"
                        width = b.wait(f"({img} || {{}}).naturalWidth")
                        detail = f"<img> decoded, {width} px wide"
                    time.sleep(0.3)
                    # the screenshot of the view itself (the iframe or the <img>), not of the report's menu
                    shown = "document.querySelector('iframe')" if kind == "html" else img
                    rect = b.evaluate(
                        f"(r => ({{x: r.x, y: r.y, width: r.width, height: r.height}}))({shown}"
                        ".getBoundingClientRect())"
                    )
                    if rect["width"] < 100 or rect["height"] < 100:
                        raise RuntimeError(f"{study}: the {output} is shown {rect['width']}x{rect['height']} px")
                    clip = {**rect, "height": min(rect["height"], 1000 - rect["y"]), "scale": 1}
                    shot = base64.b64decode(b.call("Page.captureScreenshot", format="png", clip=clip)["data"])
                    ink = not_blank(shot)
                    if ink < 0.002:  # a blank view: one colour; the smallest table inks about 1%
                        raise RuntimeError(f"{study}: the {output}'s screenshot is blank ({ink:.2%} ink)")
                    print(f"{study}: {output} rendered ({detail}; screenshot {ink:.1%} ink)")
        finally:
            b.close()


def _frame_text(b: Browser) -> str:
    """The text of the report's content frame (the iframe showing an HTML result), once it has loaded."""
    end = time.monotonic() + 20
    while time.monotonic() < end:
        tree = b.call("Page.getFrameTree")["frameTree"]
        for child in tree.get("childFrames", []):
            frame = child["frame"]
            if not frame.get("url", "").startswith("data:text/html"):
                continue
            ctx = b.call("Page.createIsolatedWorld", frameId=frame["id"], worldName="check")["executionContextId"]
            text = b.evaluate("document.readyState === 'complete' ? document.body.innerText : ''", ctx)
            if text:
                return text
        time.sleep(0.2)
    raise RuntimeError("no rendered table frame")


if __name__ == "__main__":
    try:
        check(sys.argv[1], sys.argv[2:], os.environ.get("CHROMIUM", "chromium"))
    except RuntimeError as exc:
        print(f"report check failed: {exc}", file=sys.stderr)
        sys.exit(1)
