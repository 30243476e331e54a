#!/usr/bin/env python3
"""ONNX Runtime's GEMM rate on one node, to set beside Loom's GEMM
(src/runtime/cpu/gemm.c) at the same shape and thread count: a MatMul with
B an initializer [K, N] (ONNX Runtime packs it once, at session creation),
a Gemm with transB=1 and B [N, K] for --trans-b, or with --batch N a
batched MatMul of two inputs [N, M, K] x [N, K, N]. Prints GFLOP/s of the
median of --runs runs after three warm-ups; with --threads 1 the time is
the process's CPU time (a busy machine slows the wall clock, not the work),
else the wall clock.

  python3 bench/peers/ort_gemm.py 128 3072 768 --threads 1

Needs `pip install onnx onnxruntime numpy`.
"""
import argparse
import sys
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("m", type=int)
    ap.add_argument("n", type=int)
    ap.add_argument("k", type=int)
    ap.add_argument("--trans-b", action="store_true")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=21)
    a = ap.parse_args()
    try:
        import numpy as np
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as e:
        print(f"ort_gemm: skipped: {e} (pip install onnx onnxruntime numpy)", file=sys.stderr)
        return 0
    rng = np.random.default_rng(0)
    f32 = TensorProto.FLOAT
    if a.batch > 1:
        node = helper.make_node("MatMul", ["a", "b"], ["c"])
        inputs = [helper.make_tensor_value_info("a", f32, [a.batch, a.m, a.k]),
                  helper.make_tensor_value_info("b", f32, [a.batch, a.k, a.n])]
        inits = []
        feeds = {"a": rng.uniform(-1, 1, (a.batch, a.m, a.k)).astype(np.float32),
                 "b": rng.uniform(-1, 1, (a.batch, a.k, a.n)).astype(np.float32)}
    else:
        b = rng.uniform(-1, 1, (a.n, a.k) if a.trans_b else (a.k, a.n)).astype(np.float32)
        inits = [numpy_helper.from_array(b, "b")]
        node = (helper.make_node("Gemm", ["a", "b"], ["c"], transB=1) if a.trans_b
                else helper.make_node("MatMul", ["a", "b"], ["c"]))
        inputs = [helper.make_tensor_value_info("a", f32, [a.m, a.k])]
        feeds = {"a": rng.uniform(-1, 1, (a.m, a.k)).astype(np.float32)}
    graph = helper.make_graph([node], "gemm", inputs, [helper.make_tensor_value_info("c", f32, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    so = ort.SessionOptions()
    so.intra_op_num_threads = a.threads
    so.inter_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    for _ in range(3):
        sess.run(None, feeds)
    clock = time.process_time if a.threads == 1 else time.perf_counter
    times = []
    for _ in range(a.runs):
        t0 = clock()
        sess.run(None, feeds)
        times.append(clock() - t0)
    times.sort()
    flops = 2.0 * a.batch * a.m * a.n * a.k
    print(f"onnxruntime {ort.__version__} {a.m} x {a.n} x {a.k}{' B^T' if a.trans_b else ''} batch {a.batch}, "
          f"{a.threads} threads: {flops / times[a.runs // 2] / 1e9:.1f} GFLOP/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
