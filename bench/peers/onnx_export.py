#!/usr/bin/env python3
"""Transformer layers and CNNs written by PyTorch's own ONNX exporter, to
check that Loom imports what exporters emit (not only what
tests/test_onnx_models.c writes) and to time them against ONNX Runtime:

  python3 bench/peers/onnx_export.py OUTDIR [--check build/loom]
  python3 bench/peers/onnx_bench.py OUTDIR/pt_gpt2.onnx --threads 1

Models (random weights, seeded; BatchNorm statistics randomised), f32,
one sequence of 128 tokens or one 112 x 112 image:

  pt_bert       a BERT-base encoder layer as Hugging Face's BertLayer writes
                it (separate Q, K, V Linear, K^T by transpose(-1, -2), the
                extended padding mask (1 - ones) * finfo.min added to the
                scores, post-LN with eps 1e-12, erf GELU)
  pt_bert_mask  the same with the attention mask as a second input
                (int64 [1, 128]: a mask known only at run time)
  pt_gpt2       a GPT-2-small block as GPT2Block writes it (one merged QKV
                Linear and Split, a bool causal buffer sliced and used by
                Where with finfo.min, tanh GELU, pre-LN)
  pt_gpt2_sdpa  the same through F.scaled_dot_product_attention(is_causal)
  pt_cnn        a MobileNet-like stem (conv, depthwise, pointwise, BN,
                ReLU / Hardswish, MaxPool, global pool, Linear)
  pt_resnet     a ResNet-like stem (7x7 conv, MaxPool, two basic blocks)
  pt_det_db     a PaddleOCR-style DB text detector on a 640 x 640 image, the
                structure of tests/test_onnx_ocr.c's (a MobileNetV3-like
                backbone: Conv + BN + Hardswish stem, inverted residual
                units of 1x1 expand, depthwise kxk, squeeze-excite with
                PaddleOCR's hard sigmoid relu6(1.2 x + 3) / 6, 1x1 project;
                a DBFPN neck upsampling by F.interpolate, nearest and
                bilinear with and without align_corners, adding and
                concatenating the levels; a DB head of Conv + BN + ReLU,
                two ConvTranspose2d 2x2 stride 2, Sigmoid), PP-OCR mobile
                widths (neck 96)

`--models a,b` exports only those. The exporter is TorchScript's (dynamo=False, opset 17), which needs only
torch; --dynamo uses torch.export (needs onnxscript; opset 18). With
--check LOOM each model is also run by `LOOM run` on random inputs and
compared with ONNX Runtime's outputs (needs onnxruntime). Needs torch;
Loom never needs it to build or test.
"""
import argparse
import math
import os
import subprocess
import sys
import tempfile


def models(torch):
    nn, F = torch.nn, torch.nn.functional
    D, H, FF = 768, 12, 3072

    class BertLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(D, D) for _ in range(4))
            self.ln1, self.ln2 = nn.LayerNorm(D, eps=1e-12), nn.LayerNorm(D, eps=1e-12)
            self.f1, self.f2 = nn.Linear(D, FF), nn.Linear(FF, D)

        def heads(self, x):
            return x.view(x.shape[0], x.shape[1], H, D // H).permute(0, 2, 1, 3)

        def forward(self, x, mask):
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D // H)
            extended = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
            ctx = torch.matmul(F.softmax(scores + extended, dim=-1), v).permute(0, 2, 1, 3).contiguous()
            h = self.ln1(x + self.o(ctx.view(ctx.shape[0], ctx.shape[1], D)))
            return self.ln2(h + self.f2(F.gelu(self.f1(h))))

    class BertNoMask(BertLayer):
        def forward(self, x):
            return super().forward(x, torch.ones(x.shape[0], x.shape[1], dtype=torch.int64))

    class GPT2Block(nn.Module):
        def __init__(self, sdpa):
            super().__init__()
            self.sdpa = sdpa
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc, self.out = nn.Linear(D, FF), nn.Linear(FF, D)
            causal = torch.tril(torch.ones(1024, 1024, dtype=torch.bool))
            self.register_buffer("causal", causal.view(1, 1, 1024, 1024))

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
            q, k, v = (z.view(b, t, H, D // H).transpose(1, 2) for z in (q, k, v))
            if self.sdpa:
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(D // H)
                fill = torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype)
                a = torch.matmul(F.softmax(torch.where(self.causal[:, :, :t, :t], w, fill), dim=-1), v)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    def block(ci, co, k, stride, groups=1, act=nn.ReLU):
        return [nn.Conv2d(ci, co, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(co), act()]

    class Basic(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.a = nn.Sequential(*block(c, c, 3, 1))
            self.conv, self.bn = nn.Conv2d(c, c, 3, 1, 1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x):
            return F.relu(x + self.bn(self.conv(self.a(x))))

    cnn = nn.Sequential(*block(3, 32, 3, 2), *block(32, 32, 3, 1, 32), *block(32, 64, 1, 1),
                        nn.MaxPool2d(3, 2, 1), *block(64, 128, 3, 1), *block(128, 128, 3, 1, 128),
                        *block(128, 128, 1, 1), *block(128, 128, 3, 2, act=nn.Hardswish),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(128, 10))
    resnet = nn.Sequential(*block(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1), Basic(64), Basic(64),
                           nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))
    def conv_bn(ci, co, k, s, groups=1, act=None):
        layers = [nn.Conv2d(ci, co, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(co)]
        return nn.Sequential(*layers, *([act()] if act else []))

    class SqueezeExcite(nn.Module):  # PaddleOCR's: hard sigmoid of slope 0.2
        def __init__(self, c):
            super().__init__()
            self.c1, self.c2 = nn.Conv2d(c, c // 4, 1), nn.Conv2d(c // 4, c, 1)

        def forward(self, x):
            g = self.c2(F.relu(self.c1(F.adaptive_avg_pool2d(x, 1))))
            return x * (F.relu6(1.2 * g + 3.0) / 6.0)

    class ResidualUnit(nn.Module):
        def __init__(self, ci, mid, co, k, s, se, act):
            super().__init__()
            self.body = nn.Sequential(conv_bn(ci, mid, 1, 1, act=act), conv_bn(mid, mid, k, s, mid, act),
                                      *([SqueezeExcite(mid)] if se else []), conv_bn(mid, co, 1, 1))
            self.skip = s == 1 and ci == co

        def forward(self, x):
            return x + self.body(x) if self.skip else self.body(x)

    class DetDB(nn.Module):
        def __init__(self, stem=8, exp=(32, 72, 120, 240), out=(16, 24, 40, 80), fpn=96):
            super().__init__()
            self.stem = nn.Sequential(conv_bn(3, stem, 3, 2, act=nn.Hardswish),
                                      ResidualUnit(stem, stem, stem, 3, 1, False, nn.ReLU))
            stages, ci = [], stem
            for s in range(4):
                late, act = s >= 2, nn.Hardswish if s >= 2 else nn.ReLU
                units = [ResidualUnit(ci, exp[s], out[s], 5 if late else 3, 2, late, act)]
                if late:
                    units.append(ResidualUnit(out[s], exp[s], out[s], 3, 1, True, act))
                stages.append(nn.Sequential(*units))
                ci = out[s]
            self.stages = nn.ModuleList(stages)
            self.inner = nn.ModuleList(nn.Conv2d(c, fpn, 1, bias=False) for c in out)
            self.outer = nn.ModuleList(nn.Conv2d(fpn, fpn // 4, 3, 1, 1, bias=False) for _ in out)
            q = fpn // 4
            self.head = nn.Sequential(conv_bn(fpn, q, 3, 1, act=nn.ReLU), nn.ConvTranspose2d(q, q, 2, 2),
                                      nn.BatchNorm2d(q), nn.ReLU(), nn.ConvTranspose2d(q, 1, 2, 2))

        def forward(self, x):
            up = F.interpolate
            levels, h = [], self.stem(x)
            for st in self.stages:
                h = st(h)
                levels.append(h)
            c2, c3, c4, c5 = (f(l) for f, l in zip(self.inner, levels))
            o4 = c4 + up(c5, scale_factor=2, mode="nearest")
            o3 = c3 + up(o4, scale_factor=2, mode="bilinear", align_corners=False)
            o2 = c2 + up(o3, scale_factor=2, mode="bilinear", align_corners=True)
            p5, p4, p3, p2 = (f(l) for f, l in zip(self.outer, (c5, o4, o3, o2)))
            fuse = torch.cat([up(p5, scale_factor=8, mode="nearest"),
                              up(p4, scale_factor=4, mode="bilinear", align_corners=True),
                              up(p3, scale_factor=2, mode="nearest"), p2], dim=1)
            return torch.sigmoid(self.head(fuse))

    x, img = torch.randn(1, 128, D), torch.randn(1, 3, 112, 112)
    return [("pt_bert", BertNoMask(), (x,), ["x"]),
            ("pt_bert_mask", BertLayer(), (x, torch.ones(1, 128, dtype=torch.int64)), ["x", "mask"]),
            ("pt_gpt2", GPT2Block(False), (x,), ["x"]),
            ("pt_gpt2_sdpa", GPT2Block(True), (x,), ["x"]),
            ("pt_cnn", cnn, (img,), ["img"]),
            ("pt_resnet", resnet, (img,), ["img"]),
            ("pt_det_db", DetDB(), (torch.randn(1, 3, 640, 640),), ["x"])]


def check(loom, path):
    """Runs path on ORT and on `loom run`; returns the largest |difference|."""
    import numpy as np
    import onnxruntime as ort
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(1)
    feeds, args = {}, []
    with tempfile.TemporaryDirectory() as d:
        for i in sess.get_inputs():
            if i.type == "tensor(int64)":  # a padding mask: the last quarter padded
                a = np.ones(i.shape, np.int64)
                a[..., i.shape[-1] * 3 // 4:] = 0
            else:
                a = rng.standard_normal(i.shape).astype(np.float32)
            feeds[i.name] = a
            np.save(os.path.join(d, i.name + ".npy"), a)
            args += ["--input", f"{i.name}={os.path.join(d, i.name + '.npy')}"]
        want = sess.run(None, feeds)
        out = os.path.join(d, "out")
        r = subprocess.run([loom, "run", path, *args, "--out", out], capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"loom run {path}: {r.stderr.strip()[-400:]}")
        return max(float(np.abs(np.load(os.path.join(out, o.name + ".npy")) - w).max())
                   for o, w in zip(sess.get_outputs(), want))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir")
    ap.add_argument("--dynamo", action="store_true", help="torch.export's exporter (opset 18)")
    ap.add_argument("--check", metavar="LOOM", help="compare `LOOM run` with ONNX Runtime")
    ap.add_argument("--models", help="comma-separated names to export (default: all)")
    a = ap.parse_args()
    try:
        import torch
    except ImportError as e:
        print(f"onnx_export: skipped: {e} (pip install torch)", file=sys.stderr)
        return 0
    torch.manual_seed(0)
    os.makedirs(a.outdir, exist_ok=True)
    bad = 0
    for name, m, args, names in models(torch):
        if a.models and name not in a.models.split(","):
            continue
        for mod in m.modules():  # statistics a trained network would have
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.running_mean.uniform_(-0.5, 0.5)
                mod.running_var.uniform_(0.5, 1.5)
                mod.weight.data.uniform_(0.5, 1.5)
                mod.bias.data.uniform_(-0.5, 0.5)
        m.eval()
        path = os.path.join(a.outdir, name + (".dynamo" if a.dynamo else "") + ".onnx")
        with torch.no_grad():
            torch.onnx.export(m, args, path, input_names=names, output_names=["y"],
                              opset_version=18 if a.dynamo else 17, dynamo=a.dynamo)
        line = f"{path}"
        if a.check:
            err = check(a.check, path)
            bad += not err < 1e-3
            line += f": max |Loom - ORT| {err:.3g}"
        print(line, flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
