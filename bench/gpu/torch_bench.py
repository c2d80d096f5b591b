#!/usr/bin/env python3
"""bench/gpu/torch_bench.py: PyTorch's side of the GPU benchmarks
(bench/gpu/run.sh runs it beside build/bench/gpu/gpubench and build/tfg on
the same GPU).

  python3 bench/gpu/torch_bench.py matmul 4096 f32     # f32 | tf32 | bf16 | f16
  python3 bench/gpu/torch_bench.py chain [N]           # relu(x * a + b) over N floats (256M)
  python3 bench/gpu/torch_bench.py mlp digits|wide     # a training step, eager and CUDA-graphed
  python3 bench/gpu/torch_bench.py attention B H T HD  # causal f32 attention and its gradient

Timing, as gpubench does for tfg: WARMUP calls, then SAMPLES samples of K
calls queued back to back followed by torch.cuda.synchronize(), divided by
K (K chosen so a sample takes ~25 ms), the median. One result per line,
`torch KIND key=value...`. Exit status 2 with one line when torch or a CUDA
device is missing.

matmul: torch.matmul of two n x n random matrices; f32 with
torch.backends.cuda.matmul.allow_tf32 = False (PyTorch's default), tf32
with it True, bf16/f16 in that dtype (f32 accumulation, cuBLAS's default).

chain: eager relu(x * a + b) (three kernels, two intermediates), the same
with torch.compile when it works (one generated kernel), and x.copy_ into
another buffer (device-to-device: the bandwidth ceiling); bandwidth is the
chain's least traffic, 8n bytes (read x, write y), over the time, as
gpubench reports it.

mlp: one Adam training step (zero_grad, forward, cross-entropy, backward,
step) of the digits MLP (64-256-10, batch 32) or the wide one
(784-1024-1024-10, batch 128), ReLU, lr 1e-3, on batches made once on the
GPU (tfg's side feeds each step's batch from the host). Eager: the step as
written (Adam's default foreach implementation). Graphed: the whole step
captured once into a CUDA graph (torch.cuda.graph; Adam with
capturable=True) and replayed on static input buffers, PyTorch's
"whole-network capture" recipe. Reported per step: steps of a sample / time.

attention: causal self-attention of f32 heads [B, H, T, HD] (random in
[-1, 1)), scaled_dot_product_attention (is_causal=True; PyTorch picks its
backend: for f32 the memory-efficient kernel) and the math form
(softmax of the masked scores, times v): the forward, and the gradient of
q, k and v for a given dy (torch.autograd.grad over a kept graph: the
backward alone). TFLOP/s as gpubench counts them.
"""

import statistics
import sys
import time

WARMUP = 3
SAMPLES = 15
SAMPLE_SECONDS = 0.025


def fail(msg):
    print("torch_bench.py: %s" % msg)
    sys.exit(2)


def load_torch():
    try:
        import torch
    except ImportError as e:
        fail("cannot import torch (%s)" % e)
    if not torch.cuda.is_available():
        fail("torch %s sees no CUDA device" % torch.__version__)
    return torch


def time_it(torch, fn):
    """Seconds per call of fn (see the top)."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    one = time.perf_counter() - t0
    k = max(1, min(1000, int(SAMPLE_SECONDS / one) + 1 if one > 0 else 1000))
    samples = []
    for _ in range(SAMPLES):
        t0 = time.perf_counter()
        for _ in range(k):
            fn()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - t0) / k)
    return statistics.median(samples)


def cmd_matmul(torch, n, dts):
    dtype = {"f32": torch.float32, "tf32": torch.float32, "bf16": torch.bfloat16,
             "f16": torch.float16, "f64": torch.float64}[dts]
    torch.backends.cuda.matmul.allow_tf32 = dts == "tf32"
    g = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.rand(n, n, device="cuda", generator=g) * 2 - 1).to(dtype)
    b = (torch.rand(n, n, device="cuda", generator=g) * 2 - 1).to(dtype)
    out = torch.empty(n, n, device="cuda", dtype=dtype)
    t = time_it(torch, lambda: torch.matmul(a, b, out=out))
    print("torch matmul n=%d dtype=%s ms=%.4f tflops=%.2f" % (n, dts, t * 1e3, 2.0 * n ** 3 / t * 1e-12))


def cmd_chain(torch, n):
    x = torch.rand(n, device="cuda") * 2 - 1
    a = torch.tensor(1.5, device="cuda")
    b = torch.tensor(-0.25, device="cuda")
    y = torch.empty_like(x)
    traffic = 8.0 * n
    t = time_it(torch, lambda: y.copy_(x))
    print("torch copy n=%d ms=%.4f gbps=%.1f" % (n, t * 1e3, traffic / t * 1e-9))
    tc = t

    def eager():
        return torch.relu(x * a + b)

    t = time_it(torch, eager)
    print("torch chain n=%d mode=eager ms=%.4f gbps=%.1f of_copy=%.0f%%" % (n, t * 1e3, traffic / t * 1e-9,
                                                                           100 * tc / t))
    try:
        compiled = torch.compile(eager)
        compiled()
        t = time_it(torch, compiled)
        print("torch chain n=%d mode=compiled ms=%.4f gbps=%.1f of_copy=%.0f%%" % (n, t * 1e3, traffic / t * 1e-9,
                                                                                  100 * tc / t))
    except Exception as e:  # no Triton, no compiler: the eager numbers stand alone
        print("torch chain n=%d mode=compiled none: %s" % (n, str(e).splitlines()[0][:120] if str(e) else type(e).__name__))


MODELS = {"digits": ([64, 256, 10], 32), "wide": ([784, 1024, 1024, 10], 128)}
NBATCHES = 8


def build(torch, sizes, capturable):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=capturable)
    return model, opt


def cmd_mlp(torch, name):
    sizes, batch = MODELS[name]
    torch.manual_seed(0)
    ce = torch.nn.functional.cross_entropy
    xs = [torch.rand(batch, sizes[0], device="cuda") for _ in range(NBATCHES)]
    ys = [torch.randint(0, sizes[-1], (batch,), device="cuda") for _ in range(NBATCHES)]

    # eager
    model, opt = build(torch, sizes, False)
    k = [0]

    def step():
        i = k[0] % NBATCHES
        k[0] += 1
        opt.zero_grad(set_to_none=True)
        ce(model(xs[i]), ys[i]).backward()
        opt.step()

    t = time_it(torch, step)
    print("torch mlp model=%s mode=eager batch=%d step_ms=%.4f" % (name, batch, t * 1e3))

    # graphed: the whole step captured (torch.cuda.graphs "whole-network capture")
    model, opt = build(torch, sizes, True)
    static_x = xs[0].clone()
    static_y = ys[0].clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):  # warm up on a side stream before capture, as the recipe asks
            opt.zero_grad(set_to_none=True)
            ce(model(static_x), static_y).backward()
            opt.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(graph):
        static_loss = ce(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    k[0] = 0

    def replay():
        i = k[0] % NBATCHES
        k[0] += 1
        static_x.copy_(xs[i])
        static_y.copy_(ys[i])
        graph.replay()

    t = time_it(torch, replay)
    print("torch mlp model=%s mode=graphed batch=%d step_ms=%.4f" % (name, batch, t * 1e3))


def cmd_attention(torch, b, h, t, hd):
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, dy = [(torch.rand(b, h, t, hd, device="cuda", generator=g) * 2 - 1) for _ in range(4)]
    for x in (q, k, v):
        x.requires_grad_(True)
    scale = 1.0 / hd ** 0.5
    mask = torch.ones(t, t, device="cuda", dtype=torch.bool).tril()
    flop = b * h * t * t * hd / 2.0  # one causal product, as gpubench

    def sdpa():
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)

    def math():
        s = (q @ k.transpose(-2, -1)) * scale
        return torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ v

    for name, f in (("sdpa", sdpa), ("math", math)):
        with torch.no_grad():
            tf = time_it(torch, f)
        o = f()
        tb = time_it(torch, lambda: torch.autograd.grad(o, (q, k, v), dy, retain_graph=True))
        for pas, tt, mult in (("forward", tf, 4), ("backward", tb, 10)):
            print("torch attention b=%d h=%d t=%d hd=%d pass=%s kernel=%s ms=%.4f tflops=%.2f" % (
                b, h, t, hd, pas, name, tt * 1e3, mult * flop / tt * 1e-12))


def main(argv):
    if len(argv) < 1 or argv[0] not in ("matmul", "chain", "mlp", "info", "attention"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    torch = load_torch()
    if argv[0] == "info":
        p = torch.cuda.get_device_properties(0)
        print("torch device %s: torch %s, CUDA %s, cuDNN %s, %.1f GiB, %d SMs" % (
            p.name, torch.__version__, torch.version.cuda, torch.backends.cudnn.version(),
            p.total_memory / 2 ** 30, p.multi_processor_count))
    elif argv[0] == "matmul":
        cmd_matmul(torch, int(argv[1]), argv[2])
    elif argv[0] == "chain":
        cmd_chain(torch, int(argv[1]) if len(argv) > 1 else 256 << 20)
    elif argv[0] == "attention":
        cmd_attention(torch, *[int(x) for x in argv[1:5]])
    else:
        cmd_mlp(torch, argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
