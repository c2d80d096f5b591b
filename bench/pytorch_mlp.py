#!/usr/bin/env python3
"""PyTorch peer benchmark: wall time of one MLP training step on the CPU.

One step is: forward, softmax cross-entropy, backward, Adam update
(zero_grad(set_to_none=True), model(x), F.cross_entropy, loss.backward(),
opt.step()). Models:

  digits  64-H-10, ReLU, batch B: the examples/data/digits.csv.gz MLP; by
          default H = 256, B = 32, the configuration checked in
          examples/data/README.md (--digits-hidden, --digits-batch change it)
  wide    784-1024-1024-10, ReLU, batch 128

Both run on random data of the right shapes (inputs uniform in [0, 1),
labels uniform over the 10 classes), cycling through a few pre-made batches;
the step time does not depend on the values. Parameters use torch's default
initialisation, Adam torch's defaults with lr = 1e-3.

Each model gets --warmup untimed steps, then --steps timed steps; the time of
each step is measured on its own (time.perf_counter) and the median is
reported. One line per model on stdout, in this fixed format:

  pytorch <model> threads=<T> batch=<B> step_ms=<median> steps_per_s=<1000/median>

where <model> is `digits` or `wide`, e.g.
  pytorch digits threads=2 batch=32 step_ms=0.2960 steps_per_s=3378.2

--threads is passed to torch.set_num_threads and also set as OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS before torch is imported (so the BLAS
torch calls uses no more threads either). OMP_WAIT_POLICY defaults to passive
(an OMP_WAIT_POLICY already in the environment is kept): with libgomp's
default spinning, any other load on the machine made a 2-thread step up to
100x slower (0.3 ms -> 28 ms on a shared 2-core machine); passive threads
sleep at barriers instead. A line with the torch version, the settings and
the load average goes to stderr. Exit status: 0 on success, 2 when torch
cannot be imported (or on a usage error).

Standard library + torch only. Usage:
  python3 bench/pytorch_mlp.py [--threads T] [--steps N] [--warmup W]
      [--model digits|wide|all] [--digits-hidden H] [--digits-batch B]
"""

import argparse
import os
import statistics
import sys
import time

# name -> (layer sizes, batch)
MODELS = {
    "digits": ([64, 256, 10], 32),
    "wide": ([784, 1024, 1024, 10], 128),
}
LR = 1e-3
NBATCHES = 8  # distinct pre-made batches cycled through


def default_threads():
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_args(argv):
    p = argparse.ArgumentParser(description="Time one MLP training step (forward, cross-entropy, "
                                "backward, Adam) in PyTorch on the CPU.")
    p.add_argument("--threads", type=int, default=default_threads(),
                   help="torch.set_num_threads value (default: all cores available, %(default)s)")
    p.add_argument("--steps", type=int, default=200, help="timed steps per model, >= 50 (default 200)")
    p.add_argument("--warmup", type=int, default=20, help="untimed warm-up steps per model (default 20)")
    p.add_argument("--model", choices=["all"] + list(MODELS), default="all",
                   help="which model to run (default: all)")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed value (default 0)")
    p.add_argument("--digits-hidden", type=int, default=MODELS["digits"][0][1],
                   help="hidden units of the digits MLP (default %(default)s)")
    p.add_argument("--digits-batch", type=int, default=MODELS["digits"][1],
                   help="batch size of the digits MLP (default %(default)s)")
    a = p.parse_args(argv)
    if a.threads < 1:
        p.error("--threads must be >= 1")
    if a.steps < 50:
        p.error("--steps must be >= 50")
    if a.warmup < 0:
        p.error("--warmup must be >= 0")
    if a.digits_hidden < 1 or a.digits_batch < 1:
        p.error("--digits-hidden and --digits-batch must be >= 1")
    return a


def bench_model(torch, sizes, batch, steps, warmup):
    nn = torch.nn
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    xs = [torch.rand(batch, sizes[0]) for _ in range(NBATCHES)]
    ys = [torch.randint(0, sizes[-1], (batch,)) for _ in range(NBATCHES)]
    ce = torch.nn.functional.cross_entropy

    def step(k):
        opt.zero_grad(set_to_none=True)
        loss = ce(model(xs[k % NBATCHES]), ys[k % NBATCHES])
        loss.backward()
        opt.step()

    for k in range(warmup):
        step(k)
    times = []
    clock = time.perf_counter
    for k in range(steps):
        t0 = clock()
        step(k)
        times.append(clock() - t0)
    return statistics.median(times) * 1e3


def main(argv):
    a = parse_args(argv)
    # torch.set_num_threads sets only torch's own (OpenMP) pool; the BLAS that
    # torch calls may keep its own threads (Debian's torch calls OpenBLAS, whose
    # pthreads pool defaults to every core), so fix those too, before the import.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(a.threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # see the top comment
    try:
        import torch
    except ImportError as e:
        print("pytorch_mlp.py: cannot import torch (%s); install PyTorch (e.g. Debian's "
              "python3-torch, or pip install torch) to run this benchmark" % e, file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    try:
        load = "%.2f" % os.getloadavg()[0]
    except (AttributeError, OSError):
        load = "?"
    print("# torch %s, cpu, threads=%d (torch reports %d), OMP_WAIT_POLICY=%s, warmup=%d, "
          "steps=%d, digits 64-%d-10 batch %d, wide 784-1024-1024-10 batch 128, load average %s" %
          (torch.__version__, a.threads, torch.get_num_threads(), os.environ["OMP_WAIT_POLICY"],
           a.warmup, a.steps, a.digits_hidden, a.digits_batch, load), file=sys.stderr)
    models = dict(MODELS)
    models["digits"] = ([64, a.digits_hidden, 10], a.digits_batch)
    names = list(models) if a.model == "all" else [a.model]
    for name in names:
        sizes, batch = models[name]
        ms = bench_model(torch, sizes, batch, a.steps, a.warmup)
        print("pytorch %s threads=%d batch=%d step_ms=%.4f steps_per_s=%.1f" %
              (name, a.threads, batch, ms, 1000.0 / ms), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
