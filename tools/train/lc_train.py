#!/usr/bin/python3
"""lc_train.py - trains the long-context evaluation model in PyTorch.

  lc_train.py train --data DIR --out DIR [--minutes M] [shape and schedule options]
  lc_train.py export --weights DIR --ckpt FILE      weights -> tkv-train checkpoint
  lc_train.py sample --data DIR --task TASK --len N  print one retrieval example

The model is tkv-train's llama (RMSNorm, RoPE on adjacent pairs as llama.cpp's
llama architecture applies it, grouped-query attention, SwiGLU, untied
output), so `tkv-train export` turns its weights into a GGUF that tierkv and
llama.cpp load. DIR is lc_corpus.py's output (the SentencePiece model and the
xz'd sources). Runs on a GPU in bf16 autocast with flash attention, or on the
CPU in float32 (slowly: for testing the script).

Training data, per row of --seq+1 tokens:
  corpus rows   a window of one source (sampled by --mix weights), documents
                separated by BOS, the row's first token set to BOS;
  retrieval     (--retrieval share of rows; ~15% of tokens) one example of
                a random length up to the row, needles at uniform depths,
                then BOS and corpus tokens to fill the row. Tasks (keys and
                values drawn at random per example, fillers from the corpus):
                passkey (llama.cpp's examples/passkey prompt), RULER's needle
                (single, multi-key, multi-value), variable tracking, and
                passages repeated far apart.
The schedule runs on the clock: linear warmup, cosine decay to --min-lr; rows
of --seq-short tokens until --long-at of the time, then --seq (the full
context). Weights are written (float16, .npz split into parts of < 16 MiB)
every --save-every seconds and at the end, with a log of loss and tokens/s.
"""
import argparse
import lzma
import math
import multiprocessing as mp
import os
import random
import re
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

SEP = "\x1d"
BOS = 1
SOURCES = ("kjv", "pydoc", "pgdoc", "sqlite", "python", "go", "rust")
NATURAL = ("kjv", "pydoc", "pgdoc", "sqlite")

# ---- the retrieval tasks' text (the same strings as src/eval/retrieval.c) ----------

PK_PREFIX = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. "
             "I will quiz you about the important information there.")
PK_KEY = " The pass key is {n}. Remember it. {n} is the pass key."
PK_Q = " What is the pass key? The pass key is"
NIAH_HEAD = ("Some special magic numbers are hidden within the following text. Make sure to memorize it. "
             "I will quiz you about the numbers afterwards.\n")
NIAH_NEEDLE = "One of the special magic numbers for {k} is: {v}."
NIAH_Q = ("\nWhat is the special magic number for {k} mentioned in the provided text? "
          "The special magic number for {k} mentioned in the provided text is")
MV_Q = ("\nWhat are all the special magic numbers for {k} mentioned in the provided text? "
        "The special magic numbers for {k} mentioned in the provided text are")
VT_HEAD = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n"
VT_Q = ("\nQuestion: Find all variables that are assigned the value {n} in the text above. "
        "Answer: According to the chain(s) of variables assigned in the text above, "
        "{c} variables are assigned the value {n}, they are:")
TASKS = ("passkey", "niah", "multikey", "multivalue", "vartrack", "repeat")
TASK_W = (0.25, 0.15, 0.2, 0.1, 0.12, 0.18)

# ---- data ---------------------------------------------------------------------------

G = {}  # per process: sp, docs (text), text (joined), toks (np.uint16), cpt, words


def _tok_chunk(args):
    import sentencepiece as spm
    model, docs = args
    sp = spm.SentencePieceProcessor(model_file=model)
    out = []
    for ids in sp.encode(docs):
        out.append(np.array([BOS] + ids, dtype=np.uint16))
    return np.concatenate(out) if out else np.zeros(0, np.uint16)


def _read_xz(path):
    with lzma.open(path, "rt", encoding="utf-8") as f:
        return f.read()


def load_data(d, procs):
    """Reads the sources, tokenizes them (cached in DIR/tok/), fills G."""
    import sentencepiece as spm
    model = os.path.join(d, "lc.model")
    G["sp"] = spm.SentencePieceProcessor(model_file=model)
    names = [s for s in SOURCES if os.path.exists(os.path.join(d, s + ".train.xz"))]
    with mp.Pool(procs) as pool:
        texts = pool.map(_read_xz, [os.path.join(d, s + ".train.xz") for s in names])
        G["docs"] = {s: t.split(SEP) for s, t in zip(names, texts)}
        os.makedirs(os.path.join(d, "tok"), exist_ok=True)
        G["toks"] = {}
        for s in names:
            cache = os.path.join(d, "tok", s + ".npy")
            if os.path.exists(cache):
                G["toks"][s] = np.load(cache)
                continue
            docs = G["docs"][s]
            step = max(1, len(docs) // (procs * 8))
            parts = pool.map(_tok_chunk, [(model, docs[i:i + step]) for i in range(0, len(docs), step)])
            G["toks"][s] = np.concatenate(parts)
            np.save(cache, G["toks"][s])
    G["text"] = {s: "\n".join(G["docs"][s]) for s in names}
    G["cpt"] = {}
    for s in names:  # characters per token, for sizing fillers
        t = G["text"][s][: 400000]
        G["cpt"][s] = len(t) / max(1, len(G["sp"].encode(t)))
    words = set()
    for s in NATURAL:
        if s in G["text"]:
            words.update(w for w in re.findall(r"\b[a-z]{4,10}\b", G["text"][s][:3000000]))
    G["words"] = sorted(words)
    return names


def corpus_row(rng, n, mix):
    names = list(mix)
    s = rng.choices(names, [mix[k] for k in names])[0]
    t = G["toks"][s]
    o = rng.randrange(0, len(t) - n)
    row = t[o:o + n].astype(np.int64)
    row[0] = BOS
    return row


def _lines(rng, src, n_chars):
    """Whole lines of one source from a random line start, about n_chars in all."""
    t = G["text"][src]
    o = rng.randrange(0, max(1, len(t) - n_chars - 1))
    o = t.find("\n", o) + 1
    lines = t[o:o + n_chars].split("\n")[:-1]
    return [l for l in lines if l.strip()] or ["The grass is green."]


def _key(rng):
    w = G["words"]
    r = rng.random()
    if r < 0.45:
        return rng.choice(w)
    if r < 0.85:
        return rng.choice(w) + "-" + rng.choice(w)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(rng.randint(6, 12)))


def _num(rng, lo_digits, hi_digits):
    d = rng.randint(lo_digits, hi_digits)
    return str(rng.randint(10 ** (d - 1) if d > 1 else 0, 10 ** d - 1))


def _varname(rng):
    return "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))


def _insert(lines, items, depths):
    """Inserts items (in order) at fractional depths of lines (ascending)."""
    out, k = [], 0
    n = len(lines)
    pos = [min(n, int(round(dp * n))) for dp in depths]
    for i in range(n + 1):
        while k < len(items) and pos[k] == i:
            out.append(items[k])
            k += 1
        if i < n:
            out.append(lines[i])
    return out


def _answered(parts):
    """Joins (text, weight) parts; returns the text and the weighted spans (characters)."""
    text, spans = "", []
    for t, w in parts:
        if w != 1 and t:
            spans.append((len(text), len(text) + len(t), w))
        text += t
    return text, spans


def example_text(rng, task, n_tok, multi=None):
    """One retrieval example of about n_tok tokens (text; the engine adds BOS) and its
    answer spans [(start, end, weight)] in characters: the answers weigh G["answer_w"],
    a repeated passage's second copy G["repeat_w"]."""
    return _answered(_example_parts(rng, task, n_tok))


def _example_parts(rng, task, n_tok):
    aw = G.get("answer_w", 1.0)
    nat = [s for s in NATURAL if s in G["text"]]
    src = rng.choice(nat) if rng.random() < 0.75 else rng.choice(list(G["text"]))
    n_chars = int(n_tok * G["cpt"][src] * 0.93)
    if task == "passkey":
        body = _lines(rng, src, n_chars)
        if rng.random() < 0.2:  # a few corpus sentences repeated, as in llama.cpp's junk
            unit = " ".join(body[: rng.randint(1, 3)])
            body = [unit] * max(1, n_chars // max(1, len(unit) + 1))
        body = [re.sub(r"\s+", " ", l).strip() for l in body]
        n = _num(rng, 1, 7) if rng.random() < 0.5 else str(rng.randint(1, 50000))
        items = _insert(body, [PK_KEY.format(n=n).strip()], [rng.random()])
        return [(PK_PREFIX + "".join(" " + x for x in items) + PK_Q, 1), (" " + n, aw), (".", 1)]
    if task in ("niah", "multikey", "multivalue"):
        body = _lines(rng, src, n_chars)
        if task == "niah":
            keys = [_key(rng)]
            vals = [_num(rng, 3, 9) if rng.random() < 0.4 else _num(rng, 7, 7)]
        elif task == "multikey":
            nk = rng.randint(2, 8)
            keys = list(dict.fromkeys(_key(rng) for _ in range(nk)))
            if len(keys) > 2 and rng.random() < 0.3:  # keys that share a word, told apart only in full
                w = keys[0].split("-")[0]
                keys = list(dict.fromkeys(keys[:1] + [w + "-" + k.split("-")[-1] if rng.random() < 0.5
                                                      else k.split("-")[-1] + "-" + w for k in keys[1:]]))
            vals = [_num(rng, 7, 7) if rng.random() < 0.7 else _num(rng, 3, 9) for _ in keys]
        else:
            keys = [_key(rng)] * rng.randint(2, 5)
            vals = list(dict.fromkeys(_num(rng, 7, 7) for _ in keys))
            keys = keys[: len(vals)]
        depths = sorted(rng.random() for _ in keys)
        order = list(range(len(keys)))
        rng.shuffle(order)
        ks = [keys[i] for i in order]
        vs = [vals[i] for i in order]
        needles = [NIAH_NEEDLE.format(k=k, v=v) for k, v in zip(ks, vs)]
        text = NIAH_HEAD + "\n".join(_insert(body, needles, depths))
        if task == "multivalue":
            ans = ", ".join(vs[:-1]) + (", and " if len(vs) > 2 else " and ") + vs[-1] if len(vs) > 1 else vs[0]
            return [(text + MV_Q.format(k=ks[0]), 1), (" " + ans, aw), (".", 1)]
        asked = rng.sample(range(len(ks)), min(len(ks), rng.randint(1, 4)))
        parts = [(text, 1)]
        for i in asked:
            parts += [(NIAH_Q.format(k=ks[i]), 1), (" " + vs[i], aw), (".", 1)]
        return parts
    if task == "vartrack":
        body = _lines(rng, src, n_chars)
        chains, items = [], []
        for _ in range(rng.choice((1, 1, 2))):
            c = [_varname(rng) for _ in range(rng.randint(1, 5))]
            n = _num(rng, 5, 5)
            chains.append((c, n))
            items.append([f"VAR {c[0]} = {n}."] + [f"VAR {c[i]} = VAR {c[i - 1]}." for i in range(1, len(c))])
        seq = []  # interleave the chains keeping each in order
        while any(items):
            it = rng.choice([x for x in items if x])
            seq.append(it.pop(0))
        depths = sorted(rng.random() for _ in seq)
        text = VT_HEAD + "\n".join(_insert(body, seq, depths))
        c, n = chains[rng.randrange(len(chains))]
        return [(text + VT_Q.format(n=n, c=len(c)), 1), (" " + " ".join(c), aw)]
    # repeat: a passage and, far later, the same passage again
    body = _lines(rng, src, n_chars)
    p_src = rng.choice(list(G["text"]))
    passage = "\n".join(_lines(rng, p_src, rng.randint(100, 900)))
    d = rng.random() * 0.7
    return [("\n".join(_insert(body, [passage], [d])) + "\n", 1), (passage, G.get("repeat_w", 1.0))]


def _encode(text, spans):
    """Token ids of text and each token's loss weight (the span it starts in)."""
    if not spans:
        ids = G["sp"].encode(text)
        return ids, None
    p = G["sp"].encode(text, out_type="immutable_proto")
    ids = [x.id for x in p.pieces]
    w = np.ones(len(ids), np.float32)
    for i, x in enumerate(p.pieces):  # the Python binding gives offsets in characters of str input
        for b, e, wt in spans:
            if b <= x.begin < e:
                w[i] = wt
    return ids, w


def _example_ids(seed, task, target, n):
    """An example's ids (BOS first) of at most n tokens, and their weights."""
    ids, w = [], None
    for _ in range(4):
        ids, w = _encode(*example_text(random.Random(seed * 7 + len(ids)), task, target))
        if len(ids) + 1 <= n:
            break
        target = int(target * n / (len(ids) + 1) * 0.95)
    ids = ([BOS] + ids)[:n]
    w = np.ones(len(ids), np.float32) if w is None else np.concatenate([[1.0], w])[: len(ids)].astype(np.float32)
    return ids, w


def retrieval_row(args):
    """One row of n tokens: a retrieval example of a random length up to the row, or
    (G["pack"] of the rows) several short ones back to back; corpus text fills the rest.
    Returns the row, the per-token loss weights and the example tokens."""
    seed, n = args
    rng = random.Random(seed)
    tw = G.get("task_w", TASK_W)
    row = np.empty(n, np.int64)
    wts = np.ones(n, np.float32)
    if rng.random() < G.get("pack", 0.0):
        at = 0
        while n - at > 256:
            task = rng.choices(TASKS, tw)[0]
            target = min(n - at - 1, rng.randint(200, G.get("pack_len", 2048)))
            ids, w = _example_ids(rng.randrange(1 << 62), task, target, n - at)
            row[at:at + len(ids)] = ids
            wts[at:at + len(ids)] = w
            at += len(ids)
        n_ex = at
    else:
        task = rng.choices(TASKS, tw)[0]
        target = int(n * (0.15 + 0.85 * rng.random() ** 0.5))
        ids, w = _example_ids(seed, task, target, n)
        row[: len(ids)] = ids
        wts[: len(ids)] = w
        n_ex = len(ids)
    if n_ex < n:
        row[n_ex:] = corpus_row(rng, n - n_ex, {"kjv": 1, "pydoc": 1, "pgdoc": 1})
    return row, n_ex, wts


# ---- the model ----------------------------------------------------------------------


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        hd = a.dim // a.heads
        self.h, self.kv, self.hd = a.heads, a.kv_heads, hd
        self.attn_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.wq = torch.nn.Linear(a.dim, a.heads * hd, bias=False)
        self.wk = torch.nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wv = torch.nn.Linear(a.dim, a.kv_heads * hd, bias=False)
        self.wo = torch.nn.Linear(a.heads * hd, a.dim, bias=False)
        self.ffn_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.w_gate = torch.nn.Linear(a.dim, a.ff, bias=False)
        self.w_up = torch.nn.Linear(a.dim, a.ff, bias=False)
        self.w_down = torch.nn.Linear(a.ff, a.dim, bias=False)

    def forward(self, x, cos, sin, eps):
        B, T, _ = x.shape
        h = rmsnorm(x, self.attn_norm, eps)
        q = rope(self.wq(h).view(B, T, self.h, self.hd), cos, sin).transpose(1, 2)
        k = rope(self.wk(h).view(B, T, self.kv, self.hd), cos, sin).transpose(1, 2)
        v = self.wv(h).view(B, T, self.kv, self.hd).transpose(1, 2)
        g = self.h // self.kv
        if hasattr(F, "scaled_dot_product_attention"):
            k = k.repeat_interleave(g, dim=1)
            v = v.repeat_interleave(g, dim=1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # older PyTorch (Debian's): the g query heads of a KV head as one matrix
            o = attend_blocks(q, k, v, self.kv, g, self.hd)
        x = x + self.wo(o.transpose(1, 2).reshape(B, T, self.h * self.hd))
        h = rmsnorm(x, self.ffn_norm, eps)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


ATTN_BLOCK = 1024  # query rows a block in attend_blocks


def attend_blocks(q, k, v, kv, g, hd):
    """Causal attention without scaled_dot_product_attention: the g query heads of a KV
    head as one matrix, queries in blocks of ATTN_BLOCK rows that see only the keys up to
    their block's end (at 4096 tokens 10/16 of the full T x T work and memory)."""
    B, _, T, _ = q.shape
    Q = ATTN_BLOCK if T > ATTN_BLOCK and T % ATTN_BLOCK == 0 else T
    mask = causal_mask(T, q.device)
    outs = []
    for i in range(0, T, Q):
        e = i + Q
        qb = q[:, :, i:e].reshape(B, kv, g * Q, hd) * (1 / math.sqrt(hd))
        s = (qb @ k[:, :, :e].transpose(-1, -2)).view(B, kv, g, Q, e) + mask[i:e, :e].to(qb.dtype)
        outs.append((torch.softmax(s, dim=-1).view(B, kv, g * Q, e) @ v[:, :, :e]).view(B, kv * g, Q, hd))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)


_MASKS = {}


def causal_mask(T, device):
    """0 on and below the diagonal, -inf above (cached per length)."""
    key = (T, str(device))
    if key not in _MASKS:
        m = torch.ones(T, T, dtype=torch.bool, device=device).triu(1)
        _MASKS[key] = torch.zeros(T, T, device=device).masked_fill(m, float("-inf"))
    return _MASKS[key]


def rmsnorm(x, w, eps):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * w.to(x.dtype)


def rope(x, cos, sin):
    """Rotates adjacent pairs (x[2i], x[2i+1]) by pos * inv_freq[i]."""
    xs = x.float().view(*x.shape[:-1], -1, 2)
    x0, x1 = xs[..., 0], xs[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2).to(x.dtype)


class LM(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.a = a
        self.token_embd = torch.nn.Embedding(a.vocab, a.dim)
        self.blocks = torch.nn.ModuleList(Block(a) for _ in range(a.layers))
        self.output_norm = torch.nn.Parameter(torch.ones(a.dim))
        self.output = torch.nn.Linear(a.dim, a.vocab, bias=False)
        hd = a.dim // a.heads
        self.register_buffer("inv_freq", a.rope_base ** (-torch.arange(0, hd, 2).float() / hd), persistent=False)
        for n, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * a.layers) if n.endswith(("wo.weight", "w_down.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, tok):
        T = tok.shape[1]
        ang = torch.arange(T, device=tok.device).float()[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos(), ang.sin()
        x = self.token_embd(tok)
        for b in self.blocks:
            x = b(x, cos, sin, self.a.eps)
        return self.output(rmsnorm(x, self.output_norm, self.a.eps))


def gguf_names(model):
    """tkv-train's tensor names for the model's parameters."""
    out = {"token_embd.weight": "token_embd.weight", "output_norm": "output_norm.weight",
           "output.weight": "output.weight"}
    m = {"attn_norm": "attn_norm.weight", "wq.weight": "attn_q.weight", "wk.weight": "attn_k.weight",
         "wv.weight": "attn_v.weight", "wo.weight": "attn_output.weight", "ffn_norm": "ffn_norm.weight",
         "w_gate.weight": "ffn_gate.weight", "w_up.weight": "ffn_up.weight", "w_down.weight": "ffn_down.weight"}
    for n, _ in model.named_parameters():
        if n.startswith("blocks."):
            _, l, rest = n.split(".", 2)
            out[n] = f"blk.{l}.{m[rest]}"
    return out


def save_weights(model, a, out, tag):
    names = gguf_names(model)
    arrs = {names[n]: p.detach().float().cpu().numpy().astype(np.float16) for n, p in model.named_parameters()}
    shape = np.array([a.dim, a.layers, a.heads, a.kv_heads, a.ff, a.vocab, a.ctx], np.int64)
    arrs["__shape"] = shape
    arrs["__float"] = np.array([a.rope_base, a.eps], np.float64)
    tmp = os.path.join(out, "w.npz.tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrs)
    data = open(tmp, "rb").read()
    os.remove(tmp)
    part = 15 << 20
    for i in range(0, (len(data) + part - 1) // part):
        with open(os.path.join(out, f"w{i}.part.tmp"), "wb") as f:
            f.write(data[i * part:(i + 1) * part])
        os.replace(os.path.join(out, f"w{i}.part.tmp"), os.path.join(out, f"w{i}.part"))
    with open(os.path.join(out, "w.tag"), "w") as f:
        f.write(f"{tag} parts={(len(data) + part - 1) // part} bytes={len(data)}\n")


# ---- commands -----------------------------------------------------------------------


def lr_at(a, p):
    if p < a.warmup:
        return a.lr * p / a.warmup
    q = min(1.0, (p - a.warmup) / (1 - a.warmup))
    return a.lr * (a.min_lr + (1 - a.min_lr) * 0.5 * (1 + math.cos(math.pi * q)))


def cmd_train(a):
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if dev.type == "cpu":  # some builds start with one thread
        torch.set_num_threads(os.cpu_count() or 1)
    G["bf16"] = dev.type == "cuda" or a.bf16
    t0 = time.time()
    torch.manual_seed(a.seed)
    names = load_data(a.data, a.procs)
    mix = {}
    for kv in a.mix.split(","):
        k, v = kv.split("=")
        if k in names:
            mix[k] = float(v)
    log = open(os.path.join(a.out, "train.log"), "a")

    def say(s):
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    say(f"data ready in {time.time() - t0:.1f}s: " + ", ".join(f"{s} {len(G['toks'][s]) / 1e6:.1f}M tok" for s in names)
        + f"; {sum(len(t) for t in G['toks'].values()) / 1e6:.1f}M tokens in all")
    if a.task_w:
        G["task_w"] = [float(x) for x in a.task_w.split(",")]
    G.update(answer_w=a.answer_w, repeat_w=a.repeat_w, pack=a.pack, pack_len=a.pack_len)
    pool = mp.Pool(a.procs)  # forked before CUDA starts
    model = LM(a)
    if a.init:
        z = load_gguf(a.init) if a.init.endswith(".gguf") else load_parts(a.init)
        names = gguf_names(model)
        with torch.no_grad():
            for n, p in model.named_parameters():
                p.copy_(torch.from_numpy(z[names[n]].astype(np.float32)))
        tag = "GGUF" if a.init.endswith(".gguf") else open(os.path.join(a.init, "w.tag")).read().strip()
        say(f"weights from {a.init} ({tag})")
    model = model.to(dev)
    n_par = sum(p.numel() for p in model.parameters())
    say(f"model: {n_par / 1e6:.2f}M parameters, dim {a.dim}, {a.layers} layers, {a.heads} heads/{a.kv_heads} kv, "
        f"ff {a.ff}, vocab {a.vocab}, ctx {a.ctx}, device {dev}")
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    kw = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.95), **kw)
    rng = random.Random(a.seed)
    budget = a.minutes * 60.0
    t_start = time.time()
    last_save = t_start
    step, tokens, ret_tokens = 0, 0, 0
    pending = None
    while True:
        el = time.time() - t_start
        p = el / budget
        if p >= 1.0 or (a.steps and step >= a.steps):
            break
        long = p >= a.long_at
        T = a.seq if long else a.seq_short
        B = max(1, a.batch_tokens // T)
        n_ret = sum(1 for _ in range(B) if rng.random() < a.retrieval)
        seeds = [(rng.randrange(1 << 62), T + 1) for _ in range(n_ret)]
        if pending is not None and pending[0] == T:
            rrows = pending[1].get()
        else:
            rrows = pool.map(retrieval_row, seeds)
        # the next step's retrieval rows are made while this one trains: as many as it
        # can take (B), since its share is drawn only then
        nseeds = [(rng.randrange(1 << 62), T + 1) for _ in range(B)]
        pending = (T, pool.map_async(retrieval_row, nseeds))
        rrows = rrows[:n_ret]
        ret_tokens += sum(r[1] for r in rrows)
        rows = [r[0] for r in rrows] + [corpus_row(rng, T + 1, mix) for _ in range(B - len(rrows))]
        wrows = [r[2] for r in rrows] + [np.ones(T + 1, np.float32)] * (B - len(rrows))
        x = torch.from_numpy(np.stack(rows)).to(dev, non_blocking=True)
        wt = torch.from_numpy(np.stack(wrows)[:, 1:]).to(dev, non_blocking=True).reshape(-1)
        for g in opt.param_groups:
            g["lr"] = lr_at(a, p)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=G["bf16"]):
            logits = model(x[:, :-1])
        ce = F.cross_entropy(logits.float().view(-1, a.vocab), x[:, 1:].reshape(-1), reduction="none")
        loss = ce.mean()  # what the log shows: the plain LM loss
        opt.zero_grad(set_to_none=True)
        ((ce * wt).sum() / wt.sum()).backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        step += 1
        tokens += B * T
        if step % a.log_every == 0 or step == 1:
            el = time.time() - t_start
            say(f"step {step} T {T} B {B} loss {loss.item():.4f} gnorm {gn.item():.2f} lr {lr_at(a, p):.2e} "
                f"tokens {tokens / 1e6:.1f}M ({100 * ret_tokens / max(1, tokens):.1f}% retrieval) "
                f"{tokens / max(el, 1e-9) / 1e3:.1f}k tok/s elapsed {el:.0f}s")
        if time.time() - last_save > a.save_every:
            save_weights(model, a, a.out, f"step {step}")
            last_save = time.time()
    pool.terminate()
    save_weights(model, a, a.out, f"final step {step}")
    say(f"done: {step} steps, {tokens / 1e6:.1f}M tokens ({100 * ret_tokens / max(1, tokens):.1f}% retrieval examples), "
        f"{time.time() - t_start:.0f}s training, {time.time() - t0:.0f}s in all")
    if a.eval_trials:
        quick_eval(model, a, dev, say)


@torch.no_grad()
def quick_eval(model, a, dev, say):
    """Greedy passkey and needle accuracy at a few lengths, reserved-free fillers."""
    model.eval()
    sp = G["sp"]
    for n in (2048, a.seq):
        for task in ("passkey", "niah", "multikey"):
            ok = 0
            trials = a.eval_trials
            for i in range(trials):
                rng = random.Random(1000 + i)
                text, _ = example_text(rng, task, n - 40)
                cut = text.rfind(" is") + 3  # the last question's answer follows
                ans = text[cut:].strip().rstrip(".").split(".")[0].split()[0]
                ids = [BOS] + sp.encode(text[:cut])
                x = torch.tensor([ids[-a.ctx:]], device=dev)
                out = []
                for _ in range(10):
                    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=G["bf16"]):
                        nxt = int(model(x)[0, -1].argmax())
                    out.append(nxt)
                    x = torch.cat([x, torch.tensor([[nxt]], device=dev)], 1)
                got = sp.decode(out).strip()
                ok += got.startswith(ans) and not got[len(ans):len(ans) + 1].isdigit()
            say(f"quick eval {task} at {n} tokens: {ok}/{trials}")
    model.train()


def load_parts(d):
    """The weights save_weights (or q8 below) wrote to d, as a dict of arrays."""
    import io
    parts = sorted((f for f in os.listdir(d) if re.fullmatch(r"w\d+\.part", f)), key=lambda f: int(f[1:-5]))
    z = np.load(io.BytesIO(b"".join(open(os.path.join(d, f), "rb").read() for f in parts)))
    out = {}
    for k in z.files:
        if k.endswith(".q8"):  # blocks of 32 int8 codes, one float16 scale each
            n = k[:-3]
            w = z[k].astype(np.float32) * z[n + ".scale"].astype(np.float32)[:, None]
            out[n] = w.reshape(tuple(z[n + ".shape"]))
        elif not k.endswith((".scale", ".shape")):
            out[k] = z[k]
    return out


def load_gguf(path):
    """The tensors of a GGUF file (F32, F16 or Q8_0) as float32 arrays, by name."""
    import struct
    b = open(path, "rb").read()
    if b[:4] != b"GGUF":
        raise SystemExit(f"{path}: not a GGUF file")
    ver, n_t, n_kv = struct.unpack_from("<IQQ", b, 4)
    o = 24
    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}

    def val(t):
        nonlocal o
        if t == 8:
            n, = struct.unpack_from("<Q", b, o)
            o += 8 + n
            return b[o - n:o].decode("utf-8", "replace")
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, o)
            o += 12
            return [val(et) for _ in range(n)]
        v, = struct.unpack_from("<" + scalar[t], b, o)
        o += struct.calcsize(scalar[t])
        return v

    meta = {}
    for _ in range(n_kv):
        k = val(8)
        t, = struct.unpack_from("<I", b, o)
        o += 4
        meta[k] = val(t)
    infos = []
    for _ in range(n_t):
        name = val(8)
        nd, = struct.unpack_from("<I", b, o)
        dims = struct.unpack_from(f"<{nd}Q", b, o + 4)
        t, off = struct.unpack_from("<IQ", b, o + 4 + 8 * nd)
        o += 4 + 8 * nd + 12
        infos.append((name, dims, t, off))
    al = int(meta.get("general.alignment", 32))
    base = (o + al - 1) // al * al
    out = {}
    for name, dims, t, off in infos:
        n = int(np.prod(dims))
        at = base + off
        if t == 0:
            w = np.frombuffer(b, np.float32, n, at)
        elif t == 1:
            w = np.frombuffer(b, np.float16, n, at).astype(np.float32)
        elif t == 8:
            blk = np.frombuffer(b, np.uint8, n // 32 * 34, at).reshape(-1, 34)
            d = blk[:, :2].copy().view(np.float16).astype(np.float32)
            w = (blk[:, 2:].copy().view(np.int8).astype(np.float32) * d).ravel()
        else:
            raise SystemExit(f"{path}: tensor {name} has type {t}; F32, F16 or Q8_0 only")
        out[name] = w.reshape(tuple(reversed(dims)))
    return out


def cmd_q8(a):
    """Rewrites a run's weights with matrices as 8-bit blocks (half the bytes), to carry as --init."""
    z = load_parts(a.weights)
    arrs = {}
    for k, w in z.items():
        if w.ndim == 2 and w.size % 32 == 0:
            b = w.astype(np.float32).reshape(-1, 32)
            sc = np.abs(b).max(1) / 127.0
            sc[sc == 0] = 1.0
            arrs[k + ".q8"] = np.round(b / sc[:, None]).astype(np.int8)
            arrs[k + ".scale"] = sc.astype(np.float16)
            arrs[k + ".shape"] = np.array(w.shape, np.int64)
        else:
            arrs[k] = w
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "w0.part"), "wb") as f:
        np.savez(f, **arrs)
    with open(os.path.join(a.weights, "w.tag")) as f, open(os.path.join(a.out, "w.tag"), "w") as g:
        g.write(f.read().strip() + " (8-bit blocks)\n")


def cmd_export(a):
    """Writes a TKVTRN01 checkpoint (zero AdamW moments) from the weight parts."""
    z = load_parts(a.weights)
    dim, layers, heads, kv, ff, vocab, ctx = (int(x) for x in z["__shape"])
    rope_base, eps = (float(x) for x in z["__float"])
    order = ["token_embd.weight", "output_norm.weight", "output.weight"]
    for l in range(layers):
        order += [f"blk.{l}.{n}" for n in ("attn_norm.weight", "attn_q.weight", "attn_k.weight", "attn_v.weight",
                                            "attn_output.weight", "ffn_norm.weight", "ffn_gate.weight",
                                            "ffn_up.weight", "ffn_down.weight")]
    flat = []
    for n in order:
        w = z[n].astype(np.float32).ravel()
        pad = (-len(w)) % 16
        flat.append(np.concatenate([w, np.zeros(pad, np.float32)]))
    w = np.concatenate(flat)
    with open(a.ckpt, "wb") as f:
        f.write(b"TKVTRN01")
        f.write(np.array([dim, layers, heads, kv, ff, vocab, ctx], np.uint32).tobytes())
        f.write(np.array([rope_base, eps], np.float32).tobytes())
        f.write(np.array([0, 0], np.uint64).tobytes() + np.array([0.0], np.float64).tobytes())
        f.write(np.array([len(w)], np.uint64).tobytes())
        f.write(w.tobytes())
        f.write(np.zeros(2 * len(w), np.float32).tobytes())
    print(f"export: {len(order)} tensors, {len(w)} floats -> {a.ckpt}")


def cmd_sample(a):
    load_data(a.data, a.procs)
    G.update(answer_w=2.0, repeat_w=2.0)  # to show the weighted spans
    text, spans = example_text(random.Random(a.seed), a.task, a.len)
    print(text)
    for b, e, w in spans:
        print(f"-- weight {w}: {text[b:e]!r}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--data", required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--minutes", type=float, default=7.0)
    t.add_argument("--steps", type=int, default=0, help="stop after this many steps (0: on the clock)")
    t.add_argument("--dim", type=int, default=512)
    t.add_argument("--layers", type=int, default=8)
    t.add_argument("--heads", type=int, default=8)
    t.add_argument("--kv-heads", type=int, default=2)
    t.add_argument("--ff", type=int, default=1024)
    t.add_argument("--vocab", type=int, default=8192)
    t.add_argument("--ctx", type=int, default=8192)
    t.add_argument("--rope-base", type=float, default=100000.0)
    t.add_argument("--eps", type=float, default=1e-5)
    t.add_argument("--seq", type=int, default=8192)
    t.add_argument("--seq-short", type=int, default=2048)
    t.add_argument("--long-at", type=float, default=0.55)
    t.add_argument("--batch-tokens", type=int, default=131072)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--min-lr", type=float, default=0.1)
    t.add_argument("--warmup", type=float, default=0.04)
    t.add_argument("--wd", type=float, default=0.1)
    t.add_argument("--clip", type=float, default=1.0)
    t.add_argument("--retrieval", type=float, default=0.2, help="share of rows that hold a retrieval example")
    t.add_argument("--mix", default="kjv=0.06,pydoc=0.1,pgdoc=0.07,sqlite=0.07,python=0.2,go=0.25,rust=0.25")
    t.add_argument("--procs", type=int, default=max(1, min(16, os.cpu_count() or 1)))
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--log-every", type=int, default=10)
    t.add_argument("--save-every", type=float, default=120.0)
    t.add_argument("--init", help="start from these weights: a run's output directory or a GGUF file")
    t.add_argument("--task-w", help="weights of the retrieval tasks, in the order " + ",".join(TASKS))
    t.add_argument("--answer-w", type=float, default=1.0, help="loss weight of retrieval answers' tokens")
    t.add_argument("--repeat-w", type=float, default=1.0, help="loss weight of a repeated passage's second copy")
    t.add_argument("--pack", type=float, default=0.0,
                   help="share of retrieval rows packed with several short examples")
    t.add_argument("--pack-len", type=int, default=2048, help="longest packed example, tokens")
    t.add_argument("--bf16", action="store_true",
                   help="bf16 autocast on the CPU too (pays where the CPU has AVX512-BF16 or AMX)")
    t.add_argument("--eval-trials", type=int, default=8, help="greedy retrieval checks at the end (0: none)")
    e = sub.add_parser("export")
    e.add_argument("--weights", required=True)
    e.add_argument("--ckpt", required=True)
    q = sub.add_parser("q8")
    q.add_argument("--weights", required=True)
    q.add_argument("--out", required=True)
    s = sub.add_parser("sample")
    s.add_argument("--data", required=True)
    s.add_argument("--task", choices=TASKS, default="passkey")
    s.add_argument("--len", type=int, default=600)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--procs", type=int, default=2)
    a = ap.parse_args()
    if a.cmd == "train":
        os.makedirs(a.out, exist_ok=True)
        if a.dim % a.heads or a.heads % a.kv_heads:
            sys.exit("lc_train.py: dim must divide into heads, heads into kv-heads")
        cmd_train(a)
    elif a.cmd == "export":
        cmd_export(a)
    elif a.cmd == "q8":
        cmd_q8(a)
    else:
        cmd_sample(a)


if __name__ == "__main__":
    mp.set_start_method("fork")
    main()
