"""Shared by the peer scripts: the workloads' sizes (the same as `loom bench`,
bench/wl_ops.c and bench/wl_model.c), their minimum bytes, timing and the
JSON lines of `loom bench --json`. Standard library only."""

import argparse
import json
import statistics
import sys
import time

WORKLOADS = [
    "layernorm_fwd", "layernorm_bwd", "softmax_fwd", "softmax_bwd", "bias_gelu",
    "bias_dropout_residual_ln", "cross_entropy", "adamw",
    # bench/wl_layers.c
    "rmsnorm_fwd", "rmsnorm_bwd", "swiglu", "rotary", "groupnorm_silu", "ls_cross_entropy",
    "bce_logits",
    # held-out graphs (bench/wl_layers.c)
    "instnorm_lrelu", "instnorm_lrelu_bwd", "t5_norm_residual", "alibi_softmax",
    "alibi_softmax_bwd", "geglu_bwd", "layerscale_droppath",
    # held-out graphs in the text IR (bench/wl_heldout.c)
    "rotary_bwd", "focal_loss", "softcap_zloss", "moe_top2_lb", "sqrelu_mlp", "lora_mlp",
    "convnext_tail", "resnet_block", "llama_block", "relbias_attention", "gqa_attention",
    "mixer_block", "bert_layer",
    "gpt2_block", "train_step",
]
MEMORY_BOUND = set(WORKLOADS[:22]) | {"rotary_bwd", "focal_loss", "softcap_zloss", "moe_top2_lb"}
# the sizes of bench/wl_heldout.c's templates: (full, small)
HELDOUT = {
    "rotary_bwd": (dict(T=4096, H=16, D=64), dict(T=256, H=8, D=32)),
    "focal_loss": (dict(N=4096, K=8192), dict(N=256, K=1024)),
    "softcap_zloss": (dict(N=4096, K=8192), dict(N=256, K=1024)),
    "moe_top2_lb": (dict(T=262144, E=8), dict(T=8192, E=8)),
    "sqrelu_mlp": (dict(N=4096, D=512, F=2048), dict(N=256, D=64, F=256)),
    "lora_mlp": (dict(N=4096, D=1024, R=16), dict(N=64, D=32, R=4)),
    "convnext_tail": (dict(B=8, H=56, W=56, C=96, F=384), dict(B=2, H=14, W=14, C=32, F=128)),
    "resnet_block": (dict(B=8, C=64, H=32), dict(B=2, C=8, H=6)),
    "llama_block": (dict(B=2, T=256, D=512, H=8, F=1408), dict(B=1, T=8, D=16, H=2, F=24)),
    "relbias_attention": (dict(B=2, T=256, D=512, H=8), dict(B=1, T=8, D=16, H=2)),
    "gqa_attention": (dict(B=4, T=256, D=512, H=8, G=2, R=4, E=64, K=128),
                      dict(B=1, T=8, D=16, H=4, G=2, R=2, E=4, K=8)),
    "mixer_block": (dict(B=16, P=196, C=256, S=128, F=1024), dict(B=2, P=8, C=16, S=8, F=32)),
}
SOFTCAP = 30.0
ZLOSS = 1e-4
LB_WEIGHT = 0.04  # E / 2 * 0.01
LORA_SCALE = 2.0  # alpha / R


def resnet_flops(S):
    """Conv flops of the ResNet block's step: two convs forward, and
    backward each one's input and weight gradients, 2 B C C 9 H H each."""
    return 6 * 2 * S["B"] * S["C"] * S["C"] * 9 * S["H"] * S["H"]


def lora_flops(S):
    """Matmul flops of the LoRA workload's forward + backward (dx, dA, dB):
    x W and its dx twice 2 N D D, each of the six rank-R products 2 N D R."""
    n, d, r = S["N"], S["D"], S["R"]
    return 2 * 2 * n * d * d + 6 * 2 * n * d * r


def llama_flops(S):
    """Matmul flops of the Llama-style block's forward + backward (full
    T x T attention, as Loom counts)."""
    b, t, d, f = S["B"], S["T"], S["D"], S["F"]
    return 3 * (2 * b * t * (4 * d * d + 3 * d * f) + 2 * 2 * b * t * t * d)


def relbias_flops(S):
    """Matmul flops of the T5-style attention sublayer, forward + backward."""
    b, t, d = S["B"], S["T"], S["D"]
    return 3 * (2 * b * t * 4 * d * d + 2 * 2 * b * t * t * d)


def gqa_flops(S):
    """Matmul flops of the grouped-query attention workload, forward +
    backward: the projections (q and o D x D, k and v D x K) and the
    attention's two products, each three times."""
    b, t, d, k = S["B"], S["T"], S["D"], S["K"]
    return 3 * (2 * b * t * d * (2 * d + 2 * k) + 2 * 2 * b * t * t * d)


def mixer_flops(S):
    """Matmul flops of the MLP-Mixer block, forward + backward: the token
    MLP's two products over P and S, the channel MLP's over C and F."""
    b, p, c, s, f = S["B"], S["P"], S["C"], S["S"], S["F"]
    return 3 * (2 * 2 * b * c * p * s + 2 * 2 * b * p * c * f)


def heldout(name, small):
    return HELDOUT[name][1 if small else 0]
RMS_EPS = 1e-6
GN_EPS = 1e-5
GN_GROUPS = 32
LABEL_SMOOTHING = 0.1
IN_EPS = 1e-5
LRELU_SLOPE = 0.2
ALIBI_SCALE = 0.125
DROP_PATH_KEEP = 0.9


def rows_cols(small):
    """[R, C] of the row-wise workloads."""
    return (2048, 256) if small else (32768, 1024)


def ce_shape(small):
    return (256, 1024) if small else (4096, 8192)


def swiglu_shape(small):
    """[R, 2C] of the projection u; the output is [R, C]."""
    return (1024, 512) if small else (16384, 2048)


def rotary_shapes(small):
    """x [T, H, D] and cos / sin [T, 1, D]."""
    t, h, d = (256, 8, 32) if small else (4096, 16, 64)
    return (t, h, d), (t, 1, d)


def groupnorm_shape(small):
    """x [N, C, H, W] (GN_GROUPS groups)."""
    return (2, 64, 16, 16) if small else (16, 256, 32, 32)


def instnorm_shape(small):
    """x [N, C, H, W] of instnorm_lrelu(_bwd)."""
    return (2, 32, 16, 16) if small else (8, 128, 64, 64)


def t5_shape(small):
    return (2048, 256) if small else (16384, 1024)


def alibi_shape(small):
    """scores [B, H, S, S]."""
    return (1, 4, 64, 64) if small else (4, 16, 256, 256)


def geglu_shape(small):
    """[R, 2C] of u; y and dy are [R, C]."""
    return (1024, 512) if small else (16384, 2048)


def layerscale_shape(small):
    """[B, T, C] of x, f and dy."""
    return (4, 64, 128) if small else (32, 256, 768)


def adamw_shapes(small):
    """GPT-2-small-shaped tensors: wte, wpe and one block (10.0M at full size)."""
    h, vocab, ctx = (128, 512, 256) if small else (768, 2776, 1024)
    return [(vocab, h), (ctx, h), (h,), (h,), (h, 3 * h), (3 * h,), (h, h), (h,), (h,), (h,),
            (h, 4 * h), (4 * h,), (4 * h, h), (h,)]


def model_cfg(name, small):
    """(batch, seq, hidden, heads, ffn)."""
    if small:
        return (2, 32, 128, 4, 512)
    return (8, 128, 768, 12, 3072) if name == "bert_layer" else (4, 256, 768, 12, 3072)


def train_cfg(small):
    """The main job's step (`loom train`'s defaults, src/train/trainer.c):
    (batch, context, vocab, layers, d_model, heads, d_ff, lr, betas, eps,
    weight decay). Tied head, pre-LN, GELU tanh, learned positions, no
    dropout; weight decay on the 2-d parameters only."""
    return dict(batch=8 if small else 32, context=32, vocab=256, layers=2, d=128, heads=4,
                ff=512, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, wd=0.1)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def min_bytes(name, small, io_bytes=None):
    """The minimum bytes of issue 3's Targets (2*N*4, 3*N*4, 7*P*4); for the
    model workloads, every input, parameter and output once (io_bytes)."""
    r, c = rows_cols(small)
    n = r * c
    if name in ("layernorm_fwd", "softmax_fwd", "bias_gelu", "rmsnorm_fwd"):
        return 2 * n * 4
    if name in ("layernorm_bwd", "softmax_bwd", "bias_dropout_residual_ln", "rmsnorm_bwd",
                "bce_logits"):
        return 3 * n * 4
    if name in ("cross_entropy", "ls_cross_entropy"):
        return 2 * numel(ce_shape(small)) * 4
    if name == "swiglu":
        r, c2 = swiglu_shape(small)
        return 3 * r * (c2 // 2) * 4
    if name == "rotary":
        xs, cs = rotary_shapes(small)
        return 2 * numel(xs) * 4 + 2 * numel(cs) * 4
    if name == "groupnorm_silu":
        return 2 * numel(groupnorm_shape(small)) * 4
    if name == "adamw":
        return 7 * sum(numel(s) for s in adamw_shapes(small)) * 4
    per = {"instnorm_lrelu": (instnorm_shape, 2), "instnorm_lrelu_bwd": (instnorm_shape, 3),
           "t5_norm_residual": (t5_shape, 4), "alibi_softmax": (alibi_shape, 2),
           "alibi_softmax_bwd": (alibi_shape, 3), "layerscale_droppath": (layerscale_shape, 3)}
    if name in per:
        fn, k = per[name]
        return k * numel(fn(small)) * 4
    if name == "geglu_bwd":
        r, c2 = geglu_shape(small)
        return 5 * r * (c2 // 2) * 4
    return io_bytes or 0


def shape_str(name, small):
    if name in HELDOUT:  # as loom bench prints it: the template's sizes
        return " ".join("%s=%d" % kv for kv in heldout(name, small).items())
    if name in ("cross_entropy", "ls_cross_entropy"):
        return "logits [%d, %d]" % ce_shape(small)
    if name == "swiglu":
        return "u [%d, %d]" % swiglu_shape(small)
    if name == "rotary":
        return "x [%d, %d, %d]" % rotary_shapes(small)[0]
    if name == "groupnorm_silu":
        return "[%d, %d, %d, %d] G=%d" % (groupnorm_shape(small) + (GN_GROUPS,))
    if name in ("instnorm_lrelu", "instnorm_lrelu_bwd", "alibi_softmax", "alibi_softmax_bwd"):
        fn = instnorm_shape if name.startswith("instnorm") else alibi_shape
        return "[%d, %d, %d, %d]" % fn(small)
    if name == "t5_norm_residual":
        return "[%d, %d]" % t5_shape(small)
    if name == "geglu_bwd":
        return "u [%d, %d]" % geglu_shape(small)
    if name == "layerscale_droppath":
        return "[%d, %d, %d]" % layerscale_shape(small)
    if name == "adamw":
        shapes = adamw_shapes(small)
        return "P=%d in %d tensors" % (sum(numel(s) for s in shapes), len(shapes))
    if name in ("bert_layer", "gpt2_block"):
        return "b%d s%d h%d nh%d ff%d" % model_cfg(name, small)
    if name == "train_step":
        c = train_cfg(small)
        return "b%d t%d d%d L%d: %d tokens" % (c["batch"], c["context"], c["d"], c["layers"],
                                               c["batch"] * c["context"])
    return "[%d, %d]" % rows_cols(small)


def time_fn(fn, runs, sync=lambda: None):
    """Median and min seconds of fn() over runs, after one warm-up call."""
    fn()
    sync()
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts), min(ts)


def parse_args(modes):
    p = argparse.ArgumentParser(description="Runs `loom bench` workloads on a peer framework "
                                            "and prints the same JSON lines.")
    p.add_argument("workloads", nargs="*", help="default: all")
    p.add_argument("--size", choices=["small", "full"], default="full")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--modes", default=",".join(modes), help="comma-separated subset of "
                   + ",".join(modes))
    a = p.parse_args()
    for w in a.workloads:
        if w not in WORKLOADS:
            p.error("unknown workload %r (known: %s)" % (w, ", ".join(WORKLOADS)))
    a.modes = [m for m in a.modes.split(",") if m]
    for m in a.modes:
        if m not in modes:
            p.error("unknown mode %r (known: %s)" % (m, ", ".join(modes)))
    a.workloads = a.workloads or WORKLOADS
    a.small = a.size == "small"
    return a


def emit(obj):
    print(json.dumps(obj), flush=True)


def machine_line(triad_gbps, sgemm_gflops, threads, framework, triad_bytes):
    emit({"machine": {"triad_gbps": triad_gbps, "sgemm_gflops": sgemm_gflops,
                      "llc_bytes": llc_bytes(), "threads": threads, "triad_bytes": triad_bytes,
                      "triad_counting": "STREAM: 3 arrays x 4 bytes per element",
                      "sgemm_n": 2048, "framework": framework}})


def result_line(name, mode, small, median_s, min_s, runs, triad_gbps, framework, io_bytes=None,
                gemm_flops=None, sgemm_gflops=None):
    mb = min_bytes(name, small, io_bytes)
    gbps = mb / median_s / 1e9 if median_s > 0 else 0.0
    obj = {"workload": name, "mode": mode, "shape": shape_str(name, small), "ops": None,
           "kernels": None, "bytes": None, "median_s": median_s, "gbps": gbps,
           "bw_fraction": gbps / triad_gbps if triad_gbps else 0.0, "min_bytes": mb,
           "memory_bound": name in MEMORY_BOUND, "min_s": min_s, "runs": runs,
           "framework": framework}
    if gemm_flops:
        obj["gemm_flops"] = gemm_flops
        obj["gflops"] = gemm_flops / median_s / 1e9
        if sgemm_gflops:
            obj["sgemm_fraction"] = obj["gflops"] / sgemm_gflops
    emit(obj)


def error_line(name, mode, small, msg):
    emit({"workload": name, "mode": mode, "shape": shape_str(name, small), "error": msg})


def llc_bytes():
    """The largest cache of cpu0 from sysfs (as Loom reads it); 0 if unknown."""
    best = 0
    for i in range(16):
        base = "/sys/devices/system/cpu/cpu0/cache/index%d/" % i
        try:
            with open(base + "size") as f:
                s = f.read().strip()
            with open(base + "type") as f:
                if f.read().strip() == "Instruction":
                    continue
        except OSError:
            break
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
        digits = s[:-1] if s[-1:] in "KMG" else s
        if digits.isdigit():
            best = max(best, int(digits) * mult)
    return best


def progress(msg):
    print("peer: " + msg, file=sys.stderr, flush=True)
