#!/usr/bin/python3
"""torch_bench.py - training throughput of the same llama in PyTorch (CPU).

The reference point for tkv-train's tokens/s: the same architecture (RMSNorm,
RoPE on adjacent pairs, GQA, SwiGLU, untied output), AdamW and gradient
clipping, float32, on random tokens. Not part of the build; needs python3-torch.

  /usr/bin/python3 tools/train/torch_bench.py --dim 128 --layers 4 --heads 4 --kv-heads 2 \
      --ff 384 --vocab 1024 --seq 1024 --batch 1 --steps 5 --threads 2
"""
import argparse
import time

import torch
import torch.nn.functional as F

from lc_train import LM  # the llama of the long-context trainer, the same architecture


def main():
    p = argparse.ArgumentParser()
    for k, v in dict(dim=128, layers=4, heads=4, kv_heads=2, ff=384, vocab=1024, seq=1024, batch=1,
                     steps=5, threads=2).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    a.rope_base, a.eps, a.ctx = 10000.0, 1e-5, a.seq
    m = LM(a)
    n = sum(x.numel() for x in m.parameters())
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    ids = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    times = []
    for step in range(a.steps + 1):
        t0 = time.time()
        opt.zero_grad()
        loss = F.cross_entropy(m(ids[:, :-1]).view(-1, a.vocab), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        dt = time.time() - t0
        if step:  # the first step warms up
            times.append(dt)
        print(f"step {step} loss {loss.item():.4f} {a.batch * a.seq / dt:.0f} tok/s", flush=True)
    print(f"torch {torch.__version__}, {n} parameters, {a.threads} threads, batch {a.batch} x {a.seq}: "
          f"{a.batch * a.seq * len(times) / sum(times):.0f} tok/s (mean of {len(times)} steps)")


if __name__ == "__main__":
    main()
