#!/usr/bin/env python3
"""kvstore_client.py - HTTP helpers for scripts/kvstore_bench.sh and
scripts/kvstore_soak.sh (standard library only).

  ttft URL IDS_FILE MAX_TOKENS     stream a completion of the token ids in
                                   IDS_FILE; prints 'ttft_s total_s text' as JSON
  ids N SEED                       N random token ids (JSON array) from SEED
  soak URL SECONDS CLIENTS         mixed load: streaming and plain completions and
                                   chats, malformed requests mixed in; prints counts
  metric URL NAME                  the value of a /metrics line starting with NAME
  conc URL N LEN MAX_TOKENS VOCAB SEED
                                   N concurrent streamed completions of LEN random
                                   token ids below VOCAB each; prints one JSON object
                                   with each request's ttft_s, total_s, chunks and the
                                   wall time of the whole batch
"""
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse


def conn(url):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=600)


def ttft(url, ids, max_tokens, chunks=None):
    c = conn(url)
    body = json.dumps({"prompt": ids, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                       "ignore_eos": True})
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit("HTTP %d: %s" % (r.status, r.read()[:300]))
    first, text = None, []
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        d = json.loads(line[6:])
        for ch in d.get("choices", []):
            if ch.get("text"):
                if first is None:
                    first = time.monotonic() - t0
                text.append(ch["text"])
    if chunks is not None:
        chunks.append(len(text))
    return {"ttft_s": first if first is not None else time.monotonic() - t0, "total_s": time.monotonic() - t0, "text": "".join(text)}


def metric(url, name):
    c = conn(url)
    c.request("GET", "/metrics", headers={"Connection": "close"})
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split()[-1])
    return None


BAD = [
    b"{", b"[]", b'{"prompt": 5}', b'{"prompt": "x", "max_tokens": -1}', b'{"prompt": "x", "temperature": 9}',
    b'{"messages": "no"}', b'{"prompt": "x", "n": 3}', b"\xff\xfe", b'{"prompt": "x", "session_id": 7}',
]
WORDS = "once upon a time there was a little girl named lily who loved to play in the park with her dog".split()


def soak(url, seconds, clients):
    stop = time.monotonic() + seconds
    counts = {"ok": 0, "fail": 0, "bad_ok": 0, "bad_wrong": 0}
    lock = threading.Lock()
    shared = " ".join(WORDS * 6)

    def one(rng):
        kind = rng.random()
        c = conn(url)
        try:
            if kind < 0.15:
                body = rng.choice(BAD)
                c.request("POST", rng.choice(["/v1/completions", "/v1/chat/completions"]), body,
                          {"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                return "bad_ok" if r.status == 400 else "bad_wrong"
            prompt = (shared if rng.random() < 0.5 else "") + " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60)))
            stream = rng.random() < 0.5
            if rng.random() < 0.5:
                path, req = "/v1/completions", {"prompt": prompt}
            else:
                path, req = "/v1/chat/completions", {"messages": [{"role": "user", "content": prompt}]}
            req.update({"max_tokens": rng.randint(4, 48), "stream": stream, "temperature": rng.choice([0, 0.8])})
            if rng.random() < 0.3:
                req["session_id"] = "s%d" % rng.randint(0, 20)
            c.request("POST", path, json.dumps(req), {"Content-Type": "application/json"})
            r = c.getresponse()
            data = r.read()
            if r.status != 200 or (stream and not data.rstrip().endswith(b"data: [DONE]")):
                sys.stderr.write("soak: HTTP %d %s\n" % (r.status, data[:200]))
                return "fail"
            return "ok"
        except Exception as e:  # a dropped connection counts as a failure
            sys.stderr.write("soak: %r\n" % e)
            return "fail"
        finally:
            c.close()

    def worker(i):
        rng = random.Random(i)
        while time.monotonic() < stop:
            k = one(rng)
            with lock:
                counts[k] += 1

    ts = [threading.Thread(target=worker, args=(i,)) for i in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return counts


def conc(url, n, length, max_tokens, vocab, seed):
    rng = random.Random(seed)
    prompts = [[rng.randint(3, vocab - 1) for _ in range(length)] for _ in range(n)]
    res = [None] * n

    def worker(i):
        chunks = []
        try:
            r = ttft(url, prompts[i], max_tokens, chunks)
            r.pop("text")
            r["chunks"] = chunks[0]
        except (OSError, http.client.HTTPException, SystemExit) as e:
            r = {"error": str(e)[:200]}
        res[i] = r

    t0 = time.monotonic()
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"wall_s": time.monotonic() - t0, "requests": res}


def main():
    cmd = sys.argv[1]
    if cmd == "ttft":
        ids = json.load(open(sys.argv[3]))
        print(json.dumps(ttft(sys.argv[2], ids, int(sys.argv[4]))))
    elif cmd == "ids":
        rng = random.Random(int(sys.argv[3]))
        print(json.dumps([rng.randint(300, 31000) for _ in range(int(sys.argv[2]))]))
    elif cmd == "soak":
        print(json.dumps(soak(sys.argv[2], float(sys.argv[3]), int(sys.argv[4]))))
    elif cmd == "conc":
        a = sys.argv[2:]
        print(json.dumps(conc(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]), int(a[5]))))
    elif cmd == "metric":
        v = metric(sys.argv[2], sys.argv[3])
        print("" if v is None else ("%d" % v if v == int(v) else v))
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main()
