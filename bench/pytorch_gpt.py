#!/usr/bin/env python3
"""PyTorch peer benchmark: wall time of one training step of the byte-level
GPT of examples/gpt.tfg, eager, on the CPU (or a CUDA GPU with --device cuda).

The model is examples/gpt.tfg's, layer for layer, with the same
initialisation scheme:
  - a byte table wte [256, d] and position embeddings wpe [T, d], normal(0, 0.02)
  - `layers` pre-norm blocks: h = h + attn(ln1(h)); h = h + mlp(ln2(h))
    - attn: q, k, v, o projections d x d without bias (glorot/xavier-uniform),
      heads of d / heads, scores scaled by 1/sqrt(d / heads), positions j > i
      masked to -1e9 before the softmax (a mask built once, as tfg's is a
      constant), written with matmul/softmax as tfg's graph is
    - mlp: Linear(d, 4d), exact (erf) GELU, Linear(4d, d): xavier-uniform
      weights, zero biases
    - layer norms: eps 1e-5, weight ones, bias zeros
  - a final layer norm, then logits = ln(h) @ wte^T (tied embeddings)
  - loss: softmax cross-entropy over the B*T next bytes
  - AdamW(lr 3e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01), no
    decay on wpe, the biases and the layer norms (gpt.tfg's no_decay: a
    second param group), the lr warmed up over a tenth of --total-steps
    and cosine-decayed to a tenth (LambdaLR with gpt.tfg's formula),
    gradients clipped to norm --clip (clip_grad_norm_; 0: none)
  - --precision bf16: forward and loss under torch.autocast(bfloat16)
    (the logits cast to f32 for the loss), gpt.tfg's precision = bf16;
    f32 (the default) without autocast

One step is zero_grad(set_to_none=True), forward, loss, backward, clip,
opt.step(), the schedule's step, on batches of random bytes made beforehand (NBATCHES of them,
cycled; the step time does not depend on the values). --warmup untimed
steps, then --steps timed steps, each timed on its own
(time.perf_counter; on CUDA with torch.cuda.synchronize() after the step);
the median is reported, one line on stdout:

  pytorch gpt device=<cpu|cuda> mode=<eager|compiled>-<math|sdpa>[-tf32][-bf16] threads=<T> d=<d> layers=<L> heads=<H>
      T=<T> batch=<B> step_ms=<median> steps_per_s=<1000/median> tokens_per_s=<batch T / step>

--threads is passed to torch.set_num_threads and set as OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS before torch is imported, and
OMP_WAIT_POLICY defaults to passive (bench/pytorch_mlp.py says why). A line
with the torch version, the settings and the load average goes to stderr.
Exit status: 0 on success, 2 when torch cannot be imported (or CUDA is
asked for and missing, or on a usage error).

Standard library + torch only. Usage:
  python3 bench/pytorch_gpt.py [--threads N] [--steps N] [--warmup W]
      [--d 256] [--layers 4] [--heads 4] [--T 128] [--batch 8] [--device cpu|cuda]
      [--attention math|sdpa] [--compile] [--tf32] [--precision f32|bf16] [--clip 1.0]
"""

import argparse
import math
import os
import statistics
import sys
import time

NBATCHES = 4  # distinct pre-made batches cycled through
LR = 3e-3
WEIGHT_DECAY = 0.01


def default_threads():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_args(argv):
    p = argparse.ArgumentParser(description="Time one training step of examples/gpt.tfg's GPT "
                                "(forward, cross-entropy, backward, AdamW) in PyTorch eager.")
    p.add_argument("--threads", type=int, default=default_threads(),
                   help="torch.set_num_threads value (default: all cores available, %(default)s)")
    p.add_argument("--steps", type=int, default=20, help="timed steps (default 20)")
    p.add_argument("--warmup", type=int, default=3, help="untimed warm-up steps (default 3)")
    p.add_argument("--d", type=int, default=256, help="model width (default 256)")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks (default 4)")
    p.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    p.add_argument("--T", type=int, default=128, help="context in bytes (default 128)")
    p.add_argument("--batch", type=int, default=8, help="sequences per step (default 8)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where to run (default cpu)")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed value (default 0)")
    p.add_argument("--attention", choices=["math", "sdpa"], default="math",
                   help="math: matmul, masked_fill, softmax, matmul (as tfg's fused=false); sdpa: "
                   "F.scaled_dot_product_attention(is_causal=True), PyTorch 2.0 and later (default math)")
    p.add_argument("--compile", action="store_true", help="time torch.compile(model) (PyTorch 2.0 and later)")
    p.add_argument("--tf32", action="store_true", help="let CUDA matmuls use TF32 tensor cores")
    p.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                   help="autocast dtype of the forward pass (gpt.tfg's precision; default f32)")
    p.add_argument("--clip", type=float, default=1.0, help="clip_grad_norm_ max norm (gpt.tfg's clip; 0: none)")
    p.add_argument("--total-steps", type=int, default=200, help="the schedule's total steps (gpt.tfg's decay)")
    p.add_argument("--checkpoint", action="store_true",
                   help="torch.utils.checkpoint around each block (tfg's recompute = [\"block\"])")
    a = p.parse_args(argv)
    if a.threads < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--threads and --steps must be >= 1, --warmup >= 0")
    if min(a.d, a.layers, a.heads, a.T, a.batch) < 1 or a.d % a.heads:
        p.error("sizes must be >= 1 and --d a multiple of --heads")
    return a


def build(torch, a, dev):
    nn = torch.nn
    F = nn.functional

    class Attention(nn.Module):
        def __init__(self, d, heads, T):
            super().__init__()
            self.heads = heads
            self.q = nn.Linear(d, d, bias=False)
            self.k = nn.Linear(d, d, bias=False)
            self.v = nn.Linear(d, d, bias=False)
            self.o = nn.Linear(d, d, bias=False)
            # True above the diagonal (key j > query i), as tfg's greater(j, i)
            self.register_buffer("future", torch.triu(torch.ones(T, T, dtype=torch.bool), 1))
            self.scale = 1.0 / math.sqrt(d / heads)

        def forward(self, h):
            B, T, d = h.shape
            H = self.heads

            def split(t):
                return t.view(B, T, H, d // H).transpose(1, 2)

            q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
            if a.attention == "sdpa":
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                s = torch.matmul(q, k.transpose(-2, -1)) * self.scale
                s = s.masked_fill(self.future, -1e9)
                o = torch.matmul(F.softmax(s, dim=-1), v)
            return self.o(o.transpose(1, 2).reshape(B, T, d))

    class Block(nn.Module):
        def __init__(self, d, heads, T):
            super().__init__()
            self.ln1 = nn.LayerNorm(d, eps=1e-5)
            self.attn = Attention(d, heads, T)
            self.ln2 = nn.LayerNorm(d, eps=1e-5)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, h):
            h = h + self.attn(self.ln1(h))
            return h + self.fc2(F.gelu(self.fc1(self.ln2(h))))

    class GPT(nn.Module):
        def __init__(self, d, layers, heads, T):
            super().__init__()
            self.wte = nn.Parameter(torch.empty(256, d))
            self.wpe = nn.Parameter(torch.empty(T, d))
            self.blocks = nn.ModuleList(Block(d, heads, T) for _ in range(layers))
            self.ln = nn.LayerNorm(d, eps=1e-5)
            nn.init.normal_(self.wte, std=0.02)
            nn.init.normal_(self.wpe, std=0.02)
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    nn.init.xavier_uniform_(m.weight)  # tfg's glorot()
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)

        def forward(self, x):
            h = F.embedding(x, self.wte) + self.wpe
            for b in self.blocks:
                if a.checkpoint:  # the block's activations replayed for its backward
                    from torch.utils.checkpoint import checkpoint
                    h = checkpoint(b, h, use_reentrant=False)
                else:
                    h = b(h)
            return torch.matmul(self.ln(h), self.wte.t())

    return GPT(a.d, a.layers, a.heads, a.T).to(dev)


def main(argv):
    a = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see bench/pytorch_mlp.py
    try:
        import torch
    except ImportError as e:
        print("pytorch_gpt.py: cannot import torch (%s); install PyTorch (e.g. Debian's "
              "python3-torch, or pip install torch) to run this benchmark" % e, file=sys.stderr)
        return 2
    if a.device == "cuda" and not torch.cuda.is_available():
        print("pytorch_gpt.py: torch %s sees no CUDA device" % torch.__version__, file=sys.stderr)
        return 2
    if a.attention == "sdpa" and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        print("pytorch_gpt.py: torch %s has no scaled_dot_product_attention" % torch.__version__, file=sys.stderr)
        return 2
    if a.compile and not hasattr(torch, "compile"):
        print("pytorch_gpt.py: torch %s has no torch.compile" % torch.__version__, file=sys.stderr)
        return 2
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    dev = torch.device(a.device)
    model = build(torch, a, dev)
    nparams = sum(p.numel() for p in model.parameters())
    # gpt.tfg's no_decay = ["wpe", "*.b", "*.gamma", "*.beta"]: wpe, biases, layer norms
    spared = [p for n, p in model.named_parameters() if n == "wpe" or n.endswith(".bias") or ".ln" in n or n.startswith("ln.")]
    ids = {id(p) for p in spared}
    decayed = [p for p in model.parameters() if id(p) not in ids]
    opt = torch.optim.AdamW([{"params": decayed}, {"params": spared, "weight_decay": 0.0}], lr=LR,
                            weight_decay=WEIGHT_DECAY)
    warmup, total = a.total_steps / 10, a.total_steps  # gpt.tfg's cosine(warmup = 20, total = 200, min = 0.1)

    def factor(s):
        if s < warmup:
            return (s + 1) / warmup
        if s >= total:
            return 0.1
        return 0.1 + 0.9 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))) / 2

    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    batches = [torch.randint(0, 256, (a.batch, a.T + 1), device=dev) for _ in range(NBATCHES)]
    ce = torch.nn.functional.cross_entropy
    sync = torch.cuda.synchronize if a.device == "cuda" else (lambda: None)
    try:
        load = "%.2f" % os.getloadavg()[0]
    except (AttributeError, OSError):
        load = "?"
    print("# torch %s, %s, threads=%d (torch reports %d), OMP_WAIT_POLICY=%s, warmup=%d, steps=%d, "
          "gpt d=%d layers=%d heads=%d T=%d batch=%d (%d params), load average %s" %
          (torch.__version__, a.device, a.threads, torch.get_num_threads(), os.environ["OMP_WAIT_POLICY"],
           a.warmup, a.steps, a.d, a.layers, a.heads, a.T, a.batch, nparams, load), file=sys.stderr)

    run = torch.compile(model) if a.compile else model

    def step(k):
        w = batches[k % NBATCHES]
        opt.zero_grad(set_to_none=True)
        with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = run(w[:, :-1])
            loss = ce(logits.float().reshape(-1, 256), w[:, 1:].reshape(-1))
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        sched.step()
        return loss

    for k in range(a.warmup):
        step(k)
    sync()
    times = []
    clock = time.perf_counter
    for k in range(a.steps):
        t0 = clock()
        step(k)
        sync()
        times.append(clock() - t0)
    ms = statistics.median(times) * 1e3
    mode = ("compiled" if a.compile else "eager") + "-" + a.attention + ("-tf32" if a.tf32 else "") + \
        ("-bf16" if a.precision == "bf16" else "")
    print("pytorch gpt device=%s mode=%s threads=%d d=%d layers=%d heads=%d T=%d batch=%d step_ms=%.4f steps_per_s=%.2f "
          "tokens_per_s=%.0f" % (a.device, mode, a.threads, a.d, a.layers, a.heads, a.T, a.batch, ms, 1000.0 / ms,
                                 a.batch * a.T * 1000.0 / ms), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
