#!/usr/bin/env python3
"""The workloads of `loom bench` on PyTorch, eager and torch.compile, printing
the same JSON lines as `loom bench --json` (modes torch_eager, torch_compile).

    python3 bench/peers/torch_bench.py --size small [WORKLOAD...]

LOOM_PEER_DEVICE=cuda runs everything on the GPU (tensors, modules and the
machine line's triad and sgemm; timing waits for the device), as
scripts/gpu-check.sh does. Never needed to build or test Loom; needs `pip install torch`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("torch_bench: PyTorch is not installed (pip install torch)", file=sys.stderr)
    sys.exit(1)

MODES = ["torch_eager", "torch_compile"]
DEVICE = os.environ.get("LOOM_PEER_DEVICE", "cpu")
if DEVICE != "cpu":
    torch.set_default_device(DEVICE)
SYNC = torch.cuda.synchronize if DEVICE.startswith("cuda") else (lambda: None)
LN_EPS = 1e-5
P_DROP = 0.1


def rand(shape, seed, scale=1.0, offset=0.0, grad=False):
    g = torch.Generator().manual_seed(seed)
    t = (torch.rand(shape, generator=g, device="cpu") * 2 - 1) * scale + offset
    return t.to(DEVICE).requires_grad_(grad)


def nbytes(ts):
    return sum(t.numel() * t.element_size() for t in ts)


class GPT2Block(torch.nn.Module):
    """Pre-LN, causal attention, GELU tanh, dropout 0.1 (as bench/wl_model.c)."""

    def __init__(self, h, nh, ff, p):
        super().__init__()
        self.nh, self.p = nh, p
        self.ln1, self.ln2 = torch.nn.LayerNorm(h, eps=LN_EPS), torch.nn.LayerNorm(h, eps=LN_EPS)
        self.qkv, self.proj = torch.nn.Linear(h, 3 * h), torch.nn.Linear(h, h)
        self.fc, self.out = torch.nn.Linear(h, ff), torch.nn.Linear(ff, h)

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(h, dim=2)
        q, k, v = [z.view(b, t, self.nh, h // self.nh).transpose(1, 2) for z in (q, k, v)]
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=self.p, is_causal=True)
        x = x + F.dropout(self.proj(a.transpose(1, 2).reshape(b, t, h)), self.p)
        m = self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))
        return x + F.dropout(m, self.p)


class GPT(torch.nn.Module):
    """The main job's model (src/model/gpt.c): learned positions, pre-LN
    blocks without dropout, a final LayerNorm, the head tied to wte."""

    def __init__(self, c):
        super().__init__()
        d = c["d"]
        self.wte = torch.nn.Embedding(c["vocab"], d)
        self.wpe = torch.nn.Embedding(c["context"], d)
        self.blocks = torch.nn.ModuleList(GPT2Block(d, c["heads"], c["ff"], 0.0)
                                          for _ in range(c["layers"]))
        self.lnf = torch.nn.LayerNorm(d, eps=LN_EPS)
        for p in self.parameters():
            if p.dim() == 2:
                torch.nn.init.normal_(p, 0.0, 0.02)

    def forward(self, tokens, targets):
        x = self.wte(tokens) + self.wpe(torch.arange(tokens.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def train_step(small, compiled):
    """One step of the main job: zero_grad, forward, backward, AdamW."""
    c = C.train_cfg(small)
    model = GPT(c).train()
    decay = [p for p in model.parameters() if p.dim() == 2]
    other = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["wd"]},
                             {"params": other, "weight_decay": 0.0}],
                            lr=c["lr"], betas=c["betas"], eps=c["eps"], foreach=True)
    g = torch.Generator().manual_seed(7)
    shape = (c["batch"], c["context"])
    tokens = torch.randint(0, c["vocab"], shape, generator=g)
    targets = torch.randint(0, c["vocab"], shape, generator=g)
    fwd = torch.compile(model) if compiled else model
    step = torch.compile(opt.step) if compiled else opt.step

    def run():
        opt.zero_grad(set_to_none=True)
        loss = fwd(tokens, targets)
        loss.backward()
        step()
        return loss
    return run, None, None


def block_flops(b, s, h, nh, ff):
    """Matmul flops of one forward (full s x s attention, as Loom counts)."""
    return 2 * b * s * (3 * h * h + h * h + 2 * h * ff) + 2 * 2 * b * s * s * h


def rms_norm(x, g):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + C.RMS_EPS) * g


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], -1)


def build_layer(name, small, comp):
    """The workloads of bench/wl_layers.c, or None."""
    r, c = C.rows_cols(small)
    if name in ("rmsnorm_fwd", "rmsnorm_bwd"):
        bwd = name.endswith("bwd")
        x, g = rand((r, c), 1, grad=bwd), rand((c,), 2, 0.1, 1.0, grad=bwd)
        f = comp(rms_norm)
        if not bwd:
            return (lambda: f(x, g)), None, None
        dy = rand((r, c), 4)
        return (lambda: torch.autograd.grad(f(x, g), (x, g), dy)), None, None
    if name == "swiglu":
        u = rand(C.swiglu_shape(small), 1)
        half = u.shape[1] // 2
        f = comp(lambda u: F.silu(u[:, :half]) * u[:, half:])
        return (lambda: f(u)), None, None
    if name == "rotary":
        xs, cs = C.rotary_shapes(small)
        x, cos, sin = rand(xs, 1), rand(cs, 2), rand(cs, 3)
        f = comp(lambda x, cos, sin: x * cos + rotate_half(x) * sin)
        return (lambda: f(x, cos, sin)), None, None
    if name == "groupnorm_silu":
        n, ch, hh, ww = C.groupnorm_shape(small)
        x, g, b = rand((n, ch, hh, ww), 1), rand((ch,), 2, 0.1, 1.0), rand((ch,), 3, 0.02)
        f = comp(lambda x, g, b: F.silu(F.group_norm(x, C.GN_GROUPS, g, b, C.GN_EPS)))
        return (lambda: f(x, g, b)), None, None
    if name == "ls_cross_entropy":
        n, k = C.ce_shape(small)
        logits = rand((n, k), 1, grad=True)
        labels = torch.randint(0, k, (n,), generator=torch.Generator().manual_seed(2))
        f = comp(lambda lg, lb: F.cross_entropy(lg, lb, label_smoothing=C.LABEL_SMOOTHING))

        def run():
            loss = f(logits, labels)
            return loss, torch.autograd.grad(loss, (logits,))
        return run, None, None
    if name == "bce_logits":
        x, t = rand((r, c), 1, grad=True), rand((r, c), 2, 0.5, 0.5)
        f = comp(lambda x, t: F.binary_cross_entropy_with_logits(x, t))

        def run():
            loss = f(x, t)
            return loss, torch.autograd.grad(loss, (x,))
        return run, None, None
    return build_held_out(name, small, comp)


def build_text_ir(name, small, comp):
    """The held-out graphs of bench/wl_heldout.c (written in the text IR
    there), or None; io_bytes counts every input and output once."""
    S = C.heldout(name, small)
    if name == "rotary_bwd":
        t, h, d = S["T"], S["H"], S["D"]
        x, dy = rand((t, h, d), 1, grad=True), rand((t, h, d), 4)
        cs, sn = rand((t, 1, d), 2), rand((t, 1, d), 3)

        def rot(x, cs, sn):
            x1, x2 = x[..., :d // 2], x[..., d // 2:]
            return x * cs + torch.cat((-x2, x1), -1) * sn
        f = comp(rot)
        return (lambda: torch.autograd.grad(f(x, cs, sn), (x,), dy)), nbytes((x, cs, sn, dy, x)), None
    if name in ("focal_loss", "softcap_zloss"):
        n, k = S["N"], S["K"]
        z = rand((n, k), 1, grad=True)
        t = torch.randint(0, k, (n,), generator=torch.Generator().manual_seed(2)).to(DEVICE)

        def focal(z, t):
            lpt = F.log_softmax(z, -1).gather(1, t[:, None])[:, 0]
            return -((1 - lpt.exp()) ** 2 * lpt).mean()

        def softcap(z, t):
            c = C.SOFTCAP * torch.tanh(z / C.SOFTCAP)
            lse = torch.logsumexp(c, -1)
            ce = lse - c.gather(1, t[:, None])[:, 0]
            return ce.mean() + C.ZLOSS * (lse * lse).mean()
        f = comp(focal if name == "focal_loss" else softcap)

        def run():
            loss = f(z, t)
            return loss, torch.autograd.grad(loss, (z,))
        return run, nbytes((z, t, z)), None
    if name == "moe_top2_lb":
        tk, e = S["T"], S["E"]
        lg, dg = rand((tk, e), 1, grad=True), rand((tk, e), 2)

        def route(lg, dg):
            p = F.softmax(lg, -1)
            sel = torch.zeros_like(p).scatter(1, p.topk(2, -1).indices, 1.0)
            kept = p * sel
            gates = kept / kept.sum(-1, keepdim=True)
            lb = (sel.mean(0) * p.mean(0)).sum() * C.LB_WEIGHT
            return (gates * dg).sum() + lb
        f = comp(route)
        return (lambda: torch.autograd.grad(f(lg, dg), (lg,))), nbytes((lg, dg, lg)), None
    if name == "sqrelu_mlp":
        n, d, ff = S["N"], S["D"], S["F"]
        x, dy = rand((n, d), 1, grad=True), rand((n, d), 4)
        w1, w2 = rand((d, ff), 2, 0.02, grad=True), rand((ff, d), 3, 0.02, grad=True)
        f = comp(lambda x, w1, w2: torch.relu(x @ w1).square() @ w2)
        return ((lambda: torch.autograd.grad(f(x, w1, w2), (x, w1, w2), dy)),
                nbytes((x, w1, w2, dy, x, w1, w2)), 3 * 2 * 2 * n * d * ff)
    if name == "lora_mlp":
        n, d, r = S["N"], S["D"], S["R"]
        x, w, dy = rand((n, d), 1, grad=True), rand((d, d), 2), rand((n, d), 5)
        a, b = rand((d, r), 3, 0.02, grad=True), rand((r, d), 4, 0.02, grad=True)
        f = comp(lambda x, w, a, b: x @ w + C.LORA_SCALE * ((x @ a) @ b))
        return ((lambda: torch.autograd.grad(f(x, w, a, b), (x, a, b), dy)),
                nbytes((x, w, a, b, dy, x, a, b)), C.lora_flops(S))
    if name == "convnext_tail":
        xs = (S["B"], S["H"], S["W"], S["C"])
        c, ff = S["C"], S["F"]
        x = rand(xs, 1)
        ps = [rand(s, 2 + i, 0.02) for i, s in enumerate(((c,), (c,), (c, ff), (ff,), (ff, c),
                                                          (c,), (c,)))]

        def tail(x, g, bt, w1, b1, w2, b2, gamma):
            h = F.gelu(F.layer_norm(x, (c,), g, bt, 1e-6) @ w1 + b1)
            return x + gamma * (h @ w2 + b2)
        f = comp(tail)

        def run():
            with torch.no_grad():
                return f(x, *ps)
        return run, nbytes([x] + ps + [x]), 2 * 2 * x.numel() * ff
    if name == "resnet_block":
        b, c, h = S["B"], S["C"], S["H"]
        x, dy = rand((b, c, h, h), 1, grad=True), rand((b, c, h, h), 8)
        shapes = ((c, c, 3, 3), (c,), (c,), (c, c, 3, 3), (c,), (c,))
        ps = [rand(s, 2 + i, 0.1, 1.0 if i in (1, 4) else 0.0, grad=True)
              for i, s in enumerate(shapes)]

        def block(x, w1, g1, b1, w2, g2, b2):
            # PyTorch's own batch norm (nn.BatchNorm2d in training mode):
            # faster here than the same formula written out
            y = F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), None, None, g1, b1, True))
            z = F.batch_norm(F.conv2d(y, w2, padding=1), None, None, g2, b2, True)
            return F.relu(z + x)
        f = comp(block)
        return ((lambda: torch.autograd.grad(f(x, *ps), [x] + ps, dy)),
                nbytes([x] + ps + [dy, x] + ps), C.resnet_flops(S))
    if name == "llama_block":
        b, t, d, nh, ff = S["B"], S["T"], S["D"], S["H"], S["F"]
        e = d // nh
        x, dy = rand((b, t, d), 1, grad=True), rand((b, t, d), 4)
        cs, sn = rand((t, 1, e), 2), rand((t, 1, e), 3)
        shapes = ((d,), (d, d), (d, d), (d, d), (d, d), (d,), (d, ff), (d, ff), (ff, d))
        ps = [rand(s, 5 + i, 0.02, 1.0 if len(s) == 1 else 0.0, grad=True)
              for i, s in enumerate(shapes)]

        def block(x, g1, wq, wk, wv, wo, g2, wg, wu, wd):
            n = rms_norm(x, g1)
            q, k, v = ((n @ w).view(b, t, nh, e) for w in (wq, wk, wv))
            q, k = (u * cs + rotate_half(u) * sn for u in (q, k))
            a = F.scaled_dot_product_attention(*(u.transpose(1, 2) for u in (q, k, v)),
                                               is_causal=True)
            h = x + a.transpose(1, 2).reshape(b, t, d) @ wo
            n = rms_norm(h, g2)
            return h + (F.silu(n @ wg) * (n @ wu)) @ wd
        f = comp(block)
        wrt = [x] + ps
        return ((lambda: torch.autograd.grad(f(x, *ps), wrt, dy)),
                nbytes([x, cs, sn] + ps + [dy] + wrt), C.llama_flops(S))
    if name == "relbias_attention":
        b, t, d, nh = S["B"], S["T"], S["D"], S["H"]
        e = d // nh
        x, dy = rand((b, t, d), 1, grad=True), rand((b, t, d), 4)
        ps = [rand((d, d), 5 + i, 0.02, grad=True) for i in range(4)]
        ps.append(rand((nh, t, t), 9, 0.02, grad=True))

        def relbias(x, wq, wk, wv, wo, rb):
            q, k, v = ((x @ w).view(b, t, nh, e).transpose(1, 2) for w in (wq, wk, wv))
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=rb)
            return x + a.transpose(1, 2).reshape(b, t, d) @ wo
        f = comp(relbias)
        wrt = [x] + ps
        return ((lambda: torch.autograd.grad(f(x, *ps), wrt, dy)),
                nbytes([x] + ps + [dy] + wrt), C.relbias_flops(S))
    if name == "gqa_attention":
        b, t, d, nh, g, e, kd = S["B"], S["T"], S["D"], S["H"], S["G"], S["E"], S["K"]
        x, dy = rand((b, t, d), 1, grad=True), rand((b, t, d), 4)
        ps = [rand(sh, 5 + i, 0.02, grad=True)
              for i, sh in enumerate(((d, d), (d, kd), (d, kd), (d, d)))]

        def gqa(x, wq, wk, wv, wo):
            q = (x @ wq).view(b, t, nh, e).transpose(1, 2)
            k, v = ((x @ w).view(b, t, g, e).transpose(1, 2) for w in (wk, wv))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return x + a.transpose(1, 2).reshape(b, t, d) @ wo
        f = comp(gqa)
        wrt = [x] + ps
        return ((lambda: torch.autograd.grad(f(x, *ps), wrt, dy)),
                nbytes([x] + ps + [dy] + wrt), C.gqa_flops(S))
    if name == "mixer_block":
        b, p, c, sh, ff = S["B"], S["P"], S["C"], S["S"], S["F"]
        x, dy = rand((b, p, c), 1, grad=True), rand((b, p, c), 4)
        shapes = ((c,), (c,), (p, sh), (sh,), (sh, p), (p,), (c,), (c,), (c, ff), (ff,), (ff, c),
                  (c,))
        ps = [rand(s_, 5 + i, 0.02, 1.0 if i in (0, 6) else 0.0, grad=True)
              for i, s_ in enumerate(shapes)]

        def mixer(x, g1, be1, w1, b1, w2, b2, g2, be2, w3, b3, w4, b4):
            n1 = F.layer_norm(x, (c,), g1, be1, LN_EPS).transpose(1, 2)
            x1 = x + (F.gelu(n1 @ w1 + b1) @ w2 + b2).transpose(1, 2)
            n2 = F.layer_norm(x1, (c,), g2, be2, LN_EPS)
            return x1 + F.gelu(n2 @ w3 + b3) @ w4 + b4
        f = comp(mixer)
        wrt = [x] + ps
        return ((lambda: torch.autograd.grad(f(x, *ps), wrt, dy)),
                nbytes([x] + ps + [dy] + wrt), C.mixer_flops(S))
    return None


def build_held_out(name, small, comp):
    """The held-out graphs of bench/wl_layers.c, or None."""
    if name in C.HELDOUT:
        return build_text_ir(name, small, comp)
    if name in ("instnorm_lrelu", "instnorm_lrelu_bwd"):
        bwd = name.endswith("bwd")
        xs = C.instnorm_shape(small)
        ch = xs[1]
        x = rand(xs, 1, grad=bwd)
        g, b = rand((ch,), 2, 0.1, 1.0, grad=bwd), rand((ch,), 3, 0.02, grad=bwd)
        f = comp(lambda x, g, b: F.leaky_relu(F.instance_norm(x, weight=g, bias=b, eps=C.IN_EPS),
                                              C.LRELU_SLOPE))
        if not bwd:
            return (lambda: f(x, g, b)), None, None
        dy = rand(xs, 4)
        return (lambda: torch.autograd.grad(f(x, g, b), (x, g, b), dy)), None, None
    if name == "t5_norm_residual":
        xs = C.t5_shape(small)
        x, res, w = rand(xs, 1), rand(xs, 2), rand((xs[1],), 3, 0.1, 1.0)

        def t5(x, res, w):
            h = x + res
            return h, h * torch.rsqrt((h * h).mean(-1, keepdim=True) + C.RMS_EPS) * w
        f = comp(t5)
        return (lambda: f(x, res, w)), None, None
    if name in ("alibi_softmax", "alibi_softmax_bwd"):
        bwd = name.endswith("bwd")
        bs, nh, s, _ = C.alibi_shape(small)
        sc = rand((bs, nh, s, s), 1, grad=bwd)
        slopes = rand((nh, 1, 1), 2, 0.5, 0.5)
        mask = rand((bs, 1, 1, s), 3)
        pos = torch.arange(s)
        dist = (pos[None, :] - pos[:, None]).float()
        causal = pos[None, :] <= pos[:, None]

        def alibi(sc, slopes, mask):
            z = sc * C.ALIBI_SCALE + slopes * dist + mask
            return torch.softmax(z.masked_fill(~causal, float("-inf")), -1)
        f = comp(alibi)
        if not bwd:
            return (lambda: f(sc, slopes, mask)), None, None
        dy = rand((bs, nh, s, s), 4)
        return (lambda: torch.autograd.grad(f(sc, slopes, mask), (sc,), dy)), None, None
    if name == "geglu_bwd":
        u = rand(C.geglu_shape(small), 1, grad=True)
        half = u.shape[1] // 2
        dy = rand((u.shape[0], half), 4)
        f = comp(lambda u: F.gelu(u[:, :half], approximate="tanh") * u[:, half:])
        return (lambda: torch.autograd.grad(f(u), (u,), dy)), None, None
    if name == "layerscale_droppath":
        xs = C.layerscale_shape(small)
        fb, g = rand(xs, 1, grad=True), rand((xs[2],), 2, 0.02, grad=True)
        x, u, dy = rand(xs, 3), rand((xs[0], 1, 1), 4, 0.5, 0.5), rand(xs, 5)

        def ls(x, fb, g, u):
            keep = (u < C.DROP_PATH_KEEP).float() / C.DROP_PATH_KEEP
            return x + fb * g * keep
        f = comp(ls)
        return (lambda: torch.autograd.grad(f(x, fb, g, u), (fb, g), dy)), None, None
    return None


def build(name, small, compiled):
    """(fn, io_bytes, gemm_flops): fn() runs the workload once."""
    comp = torch.compile if compiled else (lambda f: f)
    r, c = C.rows_cols(small)
    if name in ("layernorm_fwd", "layernorm_bwd"):
        x = rand((r, c), 1, grad=name.endswith("bwd"))
        g = rand((c,), 2, 0.1, 1.0, grad=name.endswith("bwd"))
        b = rand((c,), 3, 0.02, grad=name.endswith("bwd"))
        f = comp(lambda x, g, b: F.layer_norm(x, (c,), g, b, LN_EPS))
        if name == "layernorm_fwd":
            return (lambda: f(x, g, b)), None, None
        dy = rand((r, c), 4)
        return (lambda: torch.autograd.grad(f(x, g, b), (x, g, b), dy)), None, None
    if name in ("softmax_fwd", "softmax_bwd"):
        x = rand((r, c), 1, grad=name.endswith("bwd"))
        f = comp(lambda x: torch.softmax(x, -1))
        if name == "softmax_fwd":
            return (lambda: f(x)), None, None
        dy = rand((r, c), 4)
        return (lambda: torch.autograd.grad(f(x), (x,), dy)), None, None
    if name == "bias_gelu":
        x, b = rand((r, c), 1), rand((c,), 2, 0.02)
        f = comp(lambda x, b: F.gelu(x + b, approximate="tanh"))
        return (lambda: f(x, b)), None, None
    if name == "bias_dropout_residual_ln":
        x, b, res = rand((r, c), 1), rand((c,), 2, 0.02), rand((r, c), 3)
        g, beta = rand((c,), 4, 0.1, 1.0), rand((c,), 5, 0.02)
        f = comp(lambda x, b, res, g, beta: F.layer_norm(
            F.dropout(x + b, P_DROP, True) + res, (c,), g, beta, LN_EPS))
        return (lambda: f(x, b, res, g, beta)), None, None
    if name == "cross_entropy":
        n, k = C.ce_shape(small)
        logits = rand((n, k), 1, grad=True)
        labels = torch.randint(0, k, (n,), generator=torch.Generator().manual_seed(2),
                               device="cpu").to(DEVICE)
        f = comp(lambda lg, lb: F.cross_entropy(lg, lb))

        def run():
            loss = f(logits, labels)
            return loss, torch.autograd.grad(loss, (logits,))
        return run, None, None
    layer = build_layer(name, small, comp)
    if layer:
        return layer
    if name == "adamw":
        params = [rand(s, i, 0.02, grad=True) for i, s in enumerate(C.adamw_shapes(small))]
        for i, p in enumerate(params):
            p.grad = rand(p.shape, 100 + i)
        groups = [{"params": [p for p in params if p.dim() == 2], "weight_decay": 0.01},
                  {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=1e-3, foreach=True)
        step = comp(opt.step)
        return (lambda: step()), None, None
    if name == "train_step":
        return train_step(small, compiled)
    bsz, s, h, nh, ff = C.model_cfg(name, small)
    x = rand((bsz, s, h), 1, grad=name == "gpt2_block")
    if name == "bert_layer":
        layer = torch.nn.TransformerEncoderLayer(h, nh, ff, dropout=0.0, activation="gelu",
                                                 layer_norm_eps=1e-12, batch_first=True,
                                                 norm_first=False).eval()
        f = comp(layer)

        def run():
            with torch.no_grad():
                return f(x)
        io = nbytes([x, x] + list(layer.parameters()))
        return run, io, block_flops(bsz, s, h, nh, ff)
    block = GPT2Block(h, nh, ff, P_DROP).train()
    f = comp(block)
    dy = rand((bsz, s, h), 4)
    wrt = [x] + list(block.parameters())

    def run():
        return torch.autograd.grad(f(x), wrt, dy)
    io = nbytes([x, dy, x] + wrt + wrt)  # x, params, dy in; y, dx, dparams out
    return run, io, 3 * block_flops(bsz, s, h, nh, ff)


def machine(threads):
    n = max(4 * C.llc_bytes(), 48 << 20) // 12
    a, b, c = torch.zeros(n), torch.ones(n), torch.full((n,), 2.0)
    med, _ = C.time_fn(lambda: torch.add(b, c, alpha=3.0, out=a), 7, SYNC)
    triad = 12 * n / med / 1e9
    m1, m2, m3 = torch.rand(2048, 2048), torch.rand(2048, 2048), torch.empty(2048, 2048)
    med, _ = C.time_fn(lambda: torch.mm(m1, m2, out=m3), 5, SYNC)
    sgemm = 2 * 2048 ** 3 / med / 1e9
    fw = "torch " + torch.__version__ + ("" if DEVICE == "cpu" else " " + DEVICE)
    C.machine_line(triad, sgemm, threads, fw, 12 * n)
    return triad, sgemm, fw


def main():
    a = C.parse_args(MODES)
    torch.manual_seed(0)
    threads = torch.get_num_threads()
    triad, sgemm, fw = machine(threads)
    for name in a.workloads:
        for mode in a.modes:
            C.progress("%s: %s" % (name, mode))
            try:
                fn, io, flops = build(name, a.small, mode == "torch_compile")
                med, mn = C.time_fn(fn, a.runs, SYNC)
            except Exception as e:  # a peer failing is reported, not fatal
                C.error_line(name, mode, a.small, "%s: %s" % (type(e).__name__, e))
                continue
            C.result_line(name, mode, a.small, med, mn, a.runs, triad, fw, io, flops, sgemm)


if __name__ == "__main__":
    main()
