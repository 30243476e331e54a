#!/usr/bin/env python3
"""ONNX Runtime on an ONNX model, timed as `loom bench MODEL.onnx` times
Loom: inputs of the declared shapes (symbolic dims 1), one warm-up run,
then the median of --runs runs. Default session options but the thread
count (--threads, as `loom bench --threads`). Prints one JSON line as
`loom bench --json` does (workload: the model's path as given, mode
onnxruntime), so compare.py puts it beside Loom's modes:

  loom bench MODEL.onnx --threads 2 --json > loom.jsonl
  python3 bench/peers/onnx_bench.py MODEL.onnx --threads 2 > ort.jsonl
  python3 bench/peers/compare.py loom.jsonl ort.jsonl

cpu_median_s is the median of the process's CPU time per run: with one
thread, the figure a busy machine disturbs least (the wall clock counts
the time other jobs hold the core). cpu_mean_s is the total over the runs
divided by their number: the kernel counts CPU time in scheduler ticks,
so with several threads a millisecond run's own figure is coarse.

With --profile it also prints, to stderr, each node's fastest and median
time over the runs (ONNX Runtime's profiler; the nodes after its own
fusions), to set beside the kernels of `loom bench MODEL.onnx --trace`.

Needs `pip install onnxruntime numpy`. Loom never needs it to build or test.
"""
import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time


def print_profile(path, out):
    """Each node's fastest and median kernel time from a profile file."""
    with open(path) as f:
        events = json.load(f)
    by_node = collections.defaultdict(list)
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            by_node[(e["name"][: -len("_kernel_time")], e["args"].get("op_name", ""))].append(e["dur"])
    total = 0
    for (name, op), d in by_node.items():
        d.sort()
        total += d[0]
        print(f"  {name[:40]:40} {op:24} min {d[0]:8d} us  median {d[len(d) // 2]:8d} us", file=out)
    print(f"  sum of the minimums: {total} us", file=out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--threads", type=int, default=0, help="0: ONNX Runtime's default")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--profile", action="store_true", help="per-node times to stderr")
    a = ap.parse_args()
    try:
        import numpy as np
        import onnxruntime as ort
    except ImportError as e:
        print(f"onnx_bench: skipped: {e} (pip install onnxruntime numpy)", file=sys.stderr)
        return 0
    so = ort.SessionOptions()
    if a.threads:
        so.intra_op_num_threads = a.threads
        so.inter_op_num_threads = 1
    if a.profile:
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(tempfile.mkdtemp(prefix="onnx_bench"), "profile")
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    types = {"tensor(float)": np.float32, "tensor(double)": np.float64, "tensor(int64)": np.int64,
             "tensor(int32)": np.int32, "tensor(bool)": np.bool_}
    rng = np.random.default_rng(42)
    feeds = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) else 1 for d in i.shape]
        dt = types.get(i.type)
        if dt is None:
            print(f"onnx_bench: input {i.name}: type {i.type} not handled", file=sys.stderr)
            return 1
        feeds[i.name] = (rng.uniform(-1, 1, shape) if dt in (np.float32, np.float64) else np.zeros(shape)).astype(dt)
    sess.run(None, feeds)
    times, cpu = [], []
    for _ in range(a.runs):
        t0, c0 = time.perf_counter(), time.process_time()
        sess.run(None, feeds)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    print(json.dumps({"workload": a.model, "mode": "onnxruntime", "median_s": statistics.median(times),
                      "min_s": min(times), "cpu_median_s": statistics.median(cpu),
                      "cpu_mean_s": sum(cpu) / len(cpu),
                      "runs": a.runs, "threads": a.threads,
                      "framework": "onnxruntime " + ort.__version__}), flush=True)
    if a.profile:
        path = sess.end_profiling()
        print_profile(path, sys.stderr)
        os.remove(path)
        os.rmdir(os.path.dirname(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
