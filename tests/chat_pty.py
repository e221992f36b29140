#!/usr/bin/env python3
"""`tierkv chat` through a pseudo-terminal, as a person would use it
(run by tests/cli_chat.sh; usage: chat_pty.py TIERKV MODEL).

1. Plain format (stories260K has no chat template), replies without end
   (--ignore-eos), so each is stopped with Ctrl-C: a first turn, Ctrl-C
   mid-reply, a second turn, Ctrl-C, /stats, /reset, a third turn, then Ctrl-C
   twice at the prompt quits with exit 0. Checked: each turn feeds exactly the
   tokens of its new text (tierkv tokenize counts them) and reuses every
   position before it; /stats adds up (positions = fed + generated) and shows
   a conversation past the model's 512-token context held under its budget.
2. A forced template (--chat-template chatml) with a system prompt, replies of
   16 tokens, two turns, /stats, then Ctrl-D (end of input): exit 0.
"""
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time

BIN, MODEL = sys.argv[1], sys.argv[2]
fails = 0


def check(cond, what):
    global fails
    if not cond:
        fails += 1
        print("FAIL", what)


def n_tokens(text, bos):
    args = [BIN, "tokenize", "-m", MODEL, "--ids", "-p", text] + ([] if bos else ["--no-bos"])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return len(re.findall(r"\d+", out))


class Chat:
    """tierkv chat on the slave side of a pty; we hold the master."""

    def __init__(self, args):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(BIN, [BIN, "chat", "-m", MODEL] + args)
        self.out = ""

    def read_until(self, pattern, timeout=120, start=None):
        """Reads until pattern matches the output from start (default: all); the match."""
        rx = re.compile(pattern)
        end = time.time() + timeout
        while True:
            m = rx.search(self.out, start or 0)
            if m:
                return m
            left = end - time.time()
            if left <= 0:
                raise TimeoutError("no /%s/ in: ...%r" % (pattern, self.out[-600:]))
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    m = rx.search(self.out, start or 0)
                    if m:
                        return m
                    raise EOFError("output ended without /%s/: ...%r" % (pattern, self.out[-600:]))
                self.out += data.decode("utf-8", "replace")

    def read_chars(self, n, start, timeout=120):
        """Reads until n characters have come after start."""
        end = time.time() + timeout
        while len(self.out) - start < n:
            left = end - time.time()
            if left <= 0:
                raise TimeoutError("%d characters, not %d, in %d s" % (len(self.out) - start, n, timeout))
            r, _, _ = select.select([self.fd], [], [], left)
            if r:
                data = os.read(self.fd, 65536)
                if not data:
                    raise EOFError("output ended after %d characters" % (len(self.out) - start))
                self.out += data.decode("utf-8", "replace")

    def prompt(self):
        """Waits for the next "> " prompt after what was read so far."""
        return self.read_until(r"(^|\n)> $", start=max(0, len(self.out) - 4))

    def send(self, s):
        os.write(self.fd, s.encode())

    def turn(self, text):
        """Sends a message; waits for its verbose summary; (fed, reused, generated)."""
        mark = len(self.out)
        self.send(text + "\n")
        m = self.read_until(r"\[turn \d+: fed (\d+) new tokens, reused (\d+) cached positions, generated (\d+)\]",
                            start=mark)
        return tuple(int(x) for x in m.groups())

    def wait(self):
        end = time.time() + 30
        while time.time() < end:
            try:
                self.read_until(r"\Z.", timeout=0.2)
            except (TimeoutError, EOFError):
                pass
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, signal.SIGKILL)
        return -1


def stats(chat):
    mark = len(chat.out)
    chat.send("/stats\n")
    m = chat.read_until(r"pool: .*\n", start=mark)
    text = chat.out[mark:m.end()]
    get = lambda rx: [int(x) for x in re.search(rx, text).groups()]
    return {
        "positions": get(r"positions: (\d+)")[0],
        "fed": get(r"tokens: (\d+) fed from input \+ (\d+) generated"),
        "held": get(r"cache: (\d+) tokens held")[0],
        "kv": re.search(r"K\+V ([\d.]+ \S+) of a ([\d.]+ \S+) budget", text).groups(),
        "tiers": get(r"hot +(\d+) tokens[\s\S]*warm +(\d+) tokens[\s\S]*cold +(\d+) tokens"),
        "moved": get(r"evicted (\d+), demoted (\d+)"),
        "text": text,
    }


def to_bytes(s):
    num, unit = s.split()
    return float(num) * {"B": 1, "KiB": 1024, "MiB": 1024 ** 2, "GiB": 1024 ** 3}[unit]


def stop_reply(chat, min_chars):
    """Lets the reply run to min_chars of output, then Ctrl-C; the turn's summary."""
    mark = len(chat.out)
    chat.read_chars(min_chars, mark)
    chat.send("\x03")
    chat.read_until(r"\[reply stopped\]", start=mark)
    m = chat.read_until(r"\[turn \d+: fed (\d+) new tokens, reused (\d+) cached positions, generated (\d+)\]",
                        start=mark)
    chat.prompt()
    return tuple(int(x) for x in m.groups())


def plain_session():
    chat = Chat(["--temp", "0", "--ignore-eos", "-v"])
    chat.read_until(r"template plain")
    chat.prompt()
    chat.send("Hello there\n")
    fed1, reused1, gen1 = stop_reply(chat, 200)
    check(fed1 == n_tokens("User: Hello there\nAssistant:", True), "turn 1 fed %d tokens" % fed1)
    check(reused1 == 0 and gen1 > 0, "turn 1: reused %d, generated %d" % (reused1, gen1))

    # the second reply runs past the model's 512-token context (about 4
    # characters a token)
    chat.send("Tell me more\n")
    fed2, reused2, gen2 = stop_reply(chat, 2500)
    check(fed2 == n_tokens("\nUser: Tell me more\nAssistant:", False), "turn 2 fed %d tokens" % fed2)
    check(reused2 == fed1 + gen1, "turn 2 reused %d of %d positions" % (reused2, fed1 + gen1))
    s = stats(chat)
    check(s["positions"] == fed1 + gen1 + fed2 + gen2, "positions %d" % s["positions"])
    check(s["fed"] == [fed1 + fed2, gen1 + gen2], "counters %s" % s["fed"])
    check(s["positions"] > 512, "the conversation (%d positions) passed the context of 512" % s["positions"])
    check(to_bytes(s["kv"][0]) <= to_bytes(s["kv"][1]), "K+V %s within the budget %s" % s["kv"])
    check(sum(s["moved"]) > 0 and s["tiers"][1] + s["tiers"][2] > 0, "the policy demoted: %s" % s["text"])

    chat.send("/reset\n")
    chat.read_until(r"\[conversation reset\]")
    chat.prompt()
    s = stats(chat)
    check(s["positions"] == 0 and s["held"] == 0, "after /reset: %s" % s["text"])
    chat.prompt()
    # one Ctrl-C at the prompt only hints; the conversation goes on
    chat.send("\x03")
    chat.read_until(r"Ctrl-C again or Ctrl-D to quit")
    chat.prompt()
    chat.send("Once more\n")
    fed3, reused3, _ = stop_reply(chat, 50)
    check(fed3 == n_tokens("User: Once more\nAssistant:", True) and reused3 == 0,
          "after /reset: fed %d, reused %d" % (fed3, reused3))

    # the Ctrl-C that stopped a reply does not count: twice at the prompt quits
    mark = len(chat.out)
    chat.send("\x03")
    chat.read_until(r"Ctrl-C again or Ctrl-D to quit", start=mark)
    chat.send("\x03")
    rc = chat.wait()
    check(rc == 0, "exit %d after Ctrl-C twice at the prompt" % rc)
    return chat


def template_session():
    sys_text = "You are a storyteller."
    chat = Chat(["--temp", "0", "-n", "16", "-v", "--chat-template", "chatml", "-sys", sys_text])
    chat.read_until(r"template chatml")
    chat.prompt()
    fed1, reused1, gen1 = chat.turn("Hi")
    chat.prompt()
    first = "<|im_start|>system\n%s<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n" % sys_text
    check(fed1 == n_tokens(first, True) and reused1 == 0, "chatml turn 1: fed %d" % fed1)
    check(0 < gen1 <= 16, "chatml turn 1 generated %d" % gen1)
    fed2, reused2, gen2 = chat.turn("More")
    chat.prompt()
    # the reply stopped at -n, so the cache lacks its <|im_end|>: the new turn brings it
    delta = "<|im_end|>\n<|im_start|>user\nMore<|im_end|>\n<|im_start|>assistant\n"
    check(fed2 == n_tokens(delta, False), "chatml turn 2: fed %d, want %d" % (fed2, n_tokens(delta, False)))
    check(reused2 == fed1 + gen1, "chatml turn 2 reused %d" % reused2)
    s = stats(chat)
    check(s["positions"] == fed1 + gen1 + fed2 + gen2, "chatml positions %d" % s["positions"])
    chat.prompt()
    chat.send("\x04")
    rc = chat.wait()
    check(rc == 0, "exit %d at end of input" % rc)


def main():
    try:
        plain_session()
        template_session()
    except (TimeoutError, EOFError) as e:
        print("FAIL", e)
        return 1
    print("chat_pty: %s" % ("ok" if not fails else "%d failures" % fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
