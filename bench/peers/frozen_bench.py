#!/usr/bin/env python3
"""The BERT-base layer forward (`loom bench bert_layer`) on the peers with
their weights frozen, to set beside `loom bench bert_layer --modes
stitch,frozen`: each framework told that the weights never change, where
it has a way to say so. Same JSON lines as the other peers, with modes

  torch_compile_frozen  torch.compile under torch.inference_mode() with
                        Inductor's freezing on (weights folded in as
                        constants, which lets it pre-pack them)
  jax_jit_closed        jax.jit of a function that closes over the
                        weights (XLA sees them as constants, not arguments)

ONNX Runtime's equivalent is its default: initializers are packed once at
session creation (bench/peers/onnx_bench.py). The plain modes stay in
torch_bench.py and jax_bench.py.

    python3 bench/peers/frozen_bench.py --runs 10 [--modes ...]

Never needed to build or test Loom; needs torch and/or jax.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

MODES = ["torch_compile_frozen", "jax_jit_closed"]
NAME = "bert_layer"


def torch_frozen(small):
    import torch
    import torch_bench as T
    import torch._inductor.config as inductor

    inductor.freezing = True
    bsz, s, h, nh, ff = C.model_cfg(NAME, small)
    x = T.rand((bsz, s, h), 1)
    layer = torch.nn.TransformerEncoderLayer(h, nh, ff, dropout=0.0, activation="gelu",
                                             layer_norm_eps=1e-12, batch_first=True,
                                             norm_first=False).eval()
    for p in layer.parameters():
        p.requires_grad_(False)
    f = torch.compile(layer)

    def run():
        with torch.inference_mode():
            return f(x)
    fw = "torch " + torch.__version__
    return run, T.nbytes([x, x] + list(layer.parameters())), T.block_flops(bsz, s, h, nh, ff), fw


def jax_closed(small):
    import jax
    import jax_bench as J

    bsz, s, h, nh, ff = C.model_cfg(NAME, small)
    x, w = J.rand((bsz, s, h), 1), J.block_params(h, ff)

    def bert(x):  # post-LN, as jax_bench's bert_layer; w is closed over
        a = J.mha(x @ w["qkv_w"] + w["qkv_b"], bsz, s, h, nh, False) @ w["proj_w"] + w["proj_b"]
        x1 = J.layer_norm(x + a, w["ln1_g"], w["ln1_b"], 1e-12)
        f2 = J.gelu(x1 @ w["fc_w"] + w["fc_b"], False) @ w["out_w"] + w["out_b"]
        return J.layer_norm(x1 + f2, w["ln2_g"], w["ln2_b"], 1e-12)
    f = jax.jit(bert)
    fw = "jax " + jax.__version__
    run = (lambda: f(x).block_until_ready())
    return run, 2 * J.nbytes(x) + J.nbytes(w), J.block_flops(bsz, s, h, ff), fw


def main():
    a = C.parse_args(MODES)
    for mode in a.modes:
        C.progress("%s: %s" % (NAME, mode))
        try:
            fn, io, flops, fw = (torch_frozen if mode.startswith("torch") else jax_closed)(a.small)
            med, mn = C.time_fn(fn, a.runs)
        except Exception as e:  # a peer failing is reported, not fatal
            C.error_line(NAME, mode, a.small, "%s: %s" % (type(e).__name__, e))
            continue
        C.result_line(NAME, mode, a.small, med, mn, a.runs, 0.0, fw, io, flops)


if __name__ == "__main__":
    main()
