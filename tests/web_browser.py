#!/usr/bin/env python3
"""The web page of `tierkv serve` in a real browser: headless Chromium driven
through chromedriver's WebDriver protocol (JSON over HTTP, Python's standard
library only). Run by tests/cli_web.sh against a running server:

  web_browser.py --url http://127.0.0.1:PORT --key KEY --model stories260K \
      --chromium /usr/bin/chromium --chromedriver /usr/bin/chromedriver [--screenshot OUT.png]

Checks, in order:
  1. without a key the page asks for one (the cache endpoint answers 401);
     typed in, the panel goes live with the model and policy shown;
  2. http://.../#key=KEY works too, and the key leaves the address bar;
  3. the page's own self-test (its SSE parser fed every split of a stream,
     byte formatting) passes;
  4. a long prompt gets a streamed chat reply, and the cache panel then shows
     that sequence with non-zero warm/cold tiers, every layer's bar non-zero,
     the budget gauge against --kv-mem, governor runs and their events;
  5. Stop ends a streaming reply: the message is marked stopped, its partial
     text kept, Send usable again;
  6. a prompt longer than the context shows the server's 400 message;
  7. the browser's console holds no error (but the 401 of step 1 and the
     400 of step 6).
Prints what it saw; exits 1 at the first failed check."""
import argparse
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

LONG_PROMPT = ("Once upon a time, there was a little girl named Lily. She loved to play outside in the park with "
               "her friends. One day, she saw a big red ball under a tree and ran to get it. ") * 6


class Fail(Exception):
    pass


class Driver:
    """A WebDriver session (W3C protocol) on a chromedriver process."""

    def __init__(self, chromedriver, chromium, tmp):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.log = open(os.path.join(tmp, "chromedriver.log"), "w")
        self.proc = subprocess.Popen([chromedriver, f"--port={port}"], stdout=self.log, stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{port}"
        self.sid = None
        for _ in range(100):
            try:
                if self.call("GET", "/status").get("ready"):
                    break
            except (OSError, Fail):
                pass
            time.sleep(0.1)
        else:
            raise Fail("chromedriver did not start")
        args = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                "--disable-extensions", "--window-size=1200,820", "--force-device-scale-factor=1",
                f"--user-data-dir={os.path.join(tmp, 'profile')}"]
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chromium, "args": args}, "goog:loggingPrefs": {"browser": "ALL"}}}}
        self.sid = self.call("POST", "/session", caps)["sessionId"]

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return json.loads(r.read() or b"{}").get("value")
        except urllib.error.HTTPError as e:
            raise Fail(f"WebDriver {method} {path}: HTTP {e.code}: {e.read()[:400]!r}") from None

    def s(self, method, path, body=None):
        return self.call(method, f"/session/{self.sid}{path}", body)

    def go(self, url):
        self.s("POST", "/url", {"url": url})

    def js(self, script, *args):
        return self.s("POST", "/execute/sync", {"script": script, "args": list(args)})

    def find(self, css):
        v = self.s("POST", "/element", {"using": "css selector", "value": css})
        return next(iter(v.values()))

    def click(self, css):
        self.s("POST", f"/element/{self.find(css)}/click", {})

    def type(self, css, text):
        self.s("POST", f"/element/{self.find(css)}/value", {"text": text})

    def wait(self, what, script, timeout=30, *args):
        """Polls script until it returns something truthy; returns that."""
        t0 = time.time()
        last = None
        while time.time() - t0 < timeout:
            last = self.js(script, *args)
            if last:
                return last
            time.sleep(0.1)
        raise Fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")

    def screenshot(self, path):
        png = base64.b64decode(self.s("GET", "/screenshot"))
        with open(path, "wb") as f:
            f.write(png)
        return len(png)

    def quit(self):
        try:
            if self.sid:
                self.s("DELETE", "")
        except (OSError, Fail):
            pass
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


def ok(msg):
    print("ok  ", msg, flush=True)


def check(cond, msg):
    if not cond:
        raise Fail(msg)
    ok(msg)


def test_key(d, a):
    d.go(a.url + "/")
    d.wait("the key form", "return !document.getElementById('keyform').hidden && "
           "document.getElementById('conn').dataset.state === 'key'")
    ok("without a key the page asks for one")
    d.type("#key", a.key)
    d.click("#keyform button")
    model = d.wait("the model name", "return document.body.dataset.polls && "
                   "document.getElementById('model').textContent")
    check(model == a.model, f"with the key typed in the panel is live: model {model}")
    d.js("sessionStorage.clear()")
    d.go("about:blank")
    d.go(a.url + "/#key=" + a.key)
    d.wait("a poll", "return document.body.dataset.polls")
    check(d.js("return location.hash") == "", "#key=KEY is taken and removed from the address bar")
    policy = d.js("return document.getElementById('policy').textContent")
    check(policy == "adaptive", f"the policy is shown: {policy}")


def test_selftest(d):
    r = d.js("return tierkv.selfTest()")
    check(r["ok"], f"the page's self-test: {r['checks']} checks, failures {r['failures'][:3]}")


CACHE_STATE = """
const tr = document.querySelector('#seqs tbody tr.done');
const layers = Array.from(document.querySelectorAll('#layers .bar'));
if (!tr) return null;
const b = (sel) => Number(tr.querySelector(sel).dataset.bytes);
return {id: tr.dataset.id, state: tr.dataset.state, hot: b('.tier-hot'), warm: b('.tier-warm'), cold: b('.tier-cold'),
  layers: layers.map((x) => Number(x.dataset.hot) + Number(x.dataset.warm) + Number(x.dataset.cold)),
  budget: Number(document.getElementById('gauge').dataset.budget),
  peak: document.getElementById('gauge-text').textContent,
  gov: Number(document.getElementById('ctr-governor_runs').dataset.value),
  govEvents: document.querySelectorAll('#events li[data-kind="governor"]').length,
  finishEvents: document.querySelectorAll('#events li[data-kind="finish"]').length,
  markHigh: document.getElementById('mark-high').style.left};
"""


def test_chat(d, a):
    d.js("document.getElementById('max-tokens').value = arguments[0];"
         "document.getElementById('temperature').value = 0;"
         "document.getElementById('prompt').value = arguments[1];", a.max_tokens, LONG_PROMPT)
    t0 = time.time()
    d.click("#send")
    reply = d.wait("the chat reply", "const m = document.querySelector('.msg.assistant:last-child');"
                   "return m && m.dataset.state !== 'streaming' && "
                   "[m.dataset.state, m.querySelector('.text').textContent, m.querySelector('.meta').textContent]", 120)
    check(reply[0] == "done" and len(reply[1]) > 0,
          f"a chat reply appeared in {time.time() - t0:.2f} s: {reply[1][:60]!r}... ({reply[2]})")
    st = d.wait("the finished sequence in the cache panel", CACHE_STATE, 10)
    print("     cache panel:", json.dumps(st), flush=True)
    check(st["warm"] + st["cold"] > 0 and st["hot"] + st["warm"] + st["cold"] > 0,
          f"the sequence {st['id']} ({st['state']}) shows non-zero tiers: hot {st['hot']}, warm {st['warm']}, "
          f"cold {st['cold']} bytes")
    check(len(st["layers"]) == a.n_layer and all(x > 0 for x in st["layers"]),
          f"{len(st['layers'])} layer bars, each non-zero: {st['layers']}")
    check(st["budget"] == a.kv_mem and abs(float(st["markHigh"].rstrip("%")) - 80) < 0.01, f"the gauge is against --kv-mem {st['budget']}, "
          f"high mark at {st['markHigh']}: {st['peak']}")
    check(st["gov"] > 0 and st["govEvents"] > 0 and st["finishEvents"] > 0,
          f"governor runs {st['gov']}, {st['govEvents']} governor events and a finish event in the log")


STOP_ON_FIRST_TEXT = """
const done = arguments[arguments.length - 1];
const obs = new MutationObserver(() => {
  const m = document.querySelector('.msg.assistant:last-child');
  if (m && m.querySelector('.text').textContent.length > 0) {
    obs.disconnect();
    document.getElementById('stop').click();
    done(true);
  }
});
obs.observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
document.getElementById('send').click();
"""


def test_stop(d, a):
    for attempt in range(1, 6):
        d.click("#clear")
        d.js("document.getElementById('max-tokens').value = 480;"
             "document.getElementById('temperature').value = 1;"
             "document.getElementById('prompt').value = 'Once upon a time';")
        d.s("POST", "/execute/async", {"script": STOP_ON_FIRST_TEXT, "args": []})
        st = d.wait("the stopped reply", "const m = document.querySelector('.msg.assistant:last-child');"
                    "return m && m.dataset.state !== 'streaming' && "
                    "[m.dataset.state, m.querySelector('.text').textContent.length, "
                    "document.getElementById('send').disabled, document.getElementById('stop').disabled]", 60)
        if st[0] == "done":
            print(f"     attempt {attempt}: the reply ended before Stop reached it; again", flush=True)
            continue
        check(st[0] == "stopped" and st[1] > 0 and not st[2] and st[3],
              f"Stop ended the stream (attempt {attempt}): {st[1]} characters kept, Send enabled, Stop disabled")
        return
    raise Fail("five replies ended before Stop could end them")


def test_error(d):
    """A request the server refuses shows its error, and the page goes on."""
    d.click("#clear")
    d.js("document.getElementById('prompt').value = arguments[0];", LONG_PROMPT * 3)
    d.click("#send")
    st = d.wait("the error", "const m = document.querySelector('.msg.assistant:last-child');"
                "return m && m.dataset.state !== 'streaming' && [m.dataset.state, m.querySelector('.meta').textContent,"
                "document.getElementById('send').disabled]", 30)
    check(st[0] == "error" and st[1].startswith("400: ") and "context" in st[1] and not st[2],
          f"a prompt longer than the context shows the server's error: {st[1]!r}")


def test_console(d):
    """No script error on the page: the browser's console holds nothing severe
    but the 401 and the 400 provoked on purpose."""
    log = d.s("POST", "/se/log", {"type": "browser"}) or []
    expected = ("status of 401", "status of 400")
    bad = [e["message"] for e in log if e.get("level") == "SEVERE" and not any(x in e.get("message", "") for x in expected)]
    check(not bad, f"the browser console: {len(log)} entries, no error but the expected 401 and 400 ({bad[:3]})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--n-layer", type=int, required=True)
    ap.add_argument("--kv-mem", type=int, required=True)
    ap.add_argument("--max-tokens", type=int, default=100)
    ap.add_argument("--chromium", required=True)
    ap.add_argument("--chromedriver", required=True)
    ap.add_argument("--screenshot")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="tkv-web-")
    d = None
    try:
        d = Driver(a.chromedriver, a.chromium, tmp)
        ok(f"chromium started: {d.s('GET', '/window/rect')}")
        test_key(d, a)
        test_selftest(d)
        test_chat(d, a)
        if a.screenshot:
            print(f"     screenshot: {a.screenshot}, {d.screenshot(a.screenshot)} bytes", flush=True)
        test_stop(d, a)
        test_error(d)
        test_console(d)
        print("PASS", flush=True)
        return 0
    except Fail as e:
        print("FAIL", e, flush=True)
        if d:
            try:
                print("     page text:", d.js("return document.body.innerText")[:1500], flush=True)
            except (OSError, Fail):
                pass
        return 1
    finally:
        if d:
            d.quit()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
