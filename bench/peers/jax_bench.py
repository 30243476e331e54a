#!/usr/bin/env python3
"""The workloads of `loom bench` on JAX (jax.jit), printing the same JSON
lines as `loom bench --json` (mode jax_jit).

    python3 bench/peers/jax_bench.py --size small [WORKLOAD...]

Never needed to build or test Loom; needs `pip install jax`."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common as C  # noqa: E402

try:
    import jax
    import jax.numpy as jnp
except ImportError:
    print("jax_bench: JAX is not installed (pip install jax)", file=sys.stderr)
    sys.exit(1)

MODES = ["jax_jit"]
LN_EPS = 1e-5
P_DROP = 0.1


def rand(shape, seed, scale=1.0, offset=0.0):
    return jax.random.uniform(jax.random.PRNGKey(seed), shape, jnp.float32, -1.0, 1.0) * scale \
        + offset


def layer_norm(x, g, b, eps=LN_EPS):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + eps) * g + b


def dropout(key, x, p):
    keep = jax.random.bernoulli(key, 1.0 - p, x.shape)
    return jnp.where(keep, x / (1.0 - p), 0.0)


def gelu(x, tanh):
    return jax.nn.gelu(x, approximate=tanh)


def mha(qkv, b, s, h, nh, causal, key=None, p=0.0):
    q, k, v = [z.reshape(b, s, nh, h // nh).transpose(0, 2, 1, 3) for z in jnp.split(qkv, 3, -1)]
    sc = q @ k.transpose(0, 1, 3, 2) / jnp.sqrt(h // nh)
    if causal:
        sc = jnp.where(jnp.tril(jnp.ones((s, s), bool)), sc, -jnp.inf)
    pr = jax.nn.softmax(sc, -1)
    if p > 0:
        pr = dropout(key, pr, p)
    return (pr @ v).transpose(0, 2, 1, 3).reshape(b, s, h)


def block_params(h, ff):
    shapes = {"qkv_w": (h, 3 * h), "qkv_b": (3 * h,), "proj_w": (h, h), "proj_b": (h,),
              "ln1_g": (h,), "ln1_b": (h,), "fc_w": (h, ff), "fc_b": (ff,), "out_w": (ff, h),
              "out_b": (h,), "ln2_g": (h,), "ln2_b": (h,)}
    return {k: rand(s, i, 0.02, 1.0 if k.endswith("_g") else 0.0)
            for i, (k, s) in enumerate(sorted(shapes.items()))}


def block_flops(b, s, h, ff):
    return 2 * b * s * (3 * h * h + h * h + 2 * h * ff) + 2 * 2 * b * s * s * h


def nbytes(tree):
    return sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(tree))


def train_step(small):
    """One step of the main job (src/model/gpt.c, `loom train`'s defaults):
    forward, cross-entropy, gradients and AdamW in one jitted function."""
    c = C.train_cfg(small)
    d, v, t, bsz = c["d"], c["vocab"], c["context"], c["batch"]
    params = {"wte": rand((v, d), 1, 0.02), "wpe": rand((t, d), 2, 0.02),
              "lnf_g": jnp.ones(d), "lnf_b": jnp.zeros(d),
              "blocks": [block_params(d, c["ff"]) for _ in range(c["layers"])]}
    tokens = jax.random.randint(jax.random.PRNGKey(3), (bsz, t), 0, v)
    targets = jax.random.randint(jax.random.PRNGKey(4), (bsz, t), 0, v)
    b1, b2 = c["betas"]

    def loss_fn(ps):
        x = ps["wte"][tokens] + ps["wpe"][None, :, :]
        for w in ps["blocks"]:
            a = mha(layer_norm(x, w["ln1_g"], w["ln1_b"]) @ w["qkv_w"] + w["qkv_b"], bsz, t, d,
                    c["heads"], True)
            x = x + a @ w["proj_w"] + w["proj_b"]
            m = gelu(layer_norm(x, w["ln2_g"], w["ln2_b"]) @ w["fc_w"] + w["fc_b"], True)
            x = x + m @ w["out_w"] + w["out_b"]
        logits = layer_norm(x, ps["lnf_g"], ps["lnf_b"]) @ ps["wte"].T
        lse = jax.nn.logsumexp(logits, -1)
        return (lse - jnp.take_along_axis(logits, targets[..., None], -1)[..., 0]).mean()

    def step(ps, ms, vs, k):
        loss, gs = jax.value_and_grad(loss_fn)(ps)

        def upd(p, g, m, v_):
            wd = c["wd"] if p.ndim == 2 else 0.0
            m = b1 * m + (1 - b1) * g
            v_ = b2 * v_ + (1 - b2) * g * g
            u = (m / (1 - b1 ** k)) / (jnp.sqrt(v_ / (1 - b2 ** k)) + c["eps"]) + wd * p
            return p - c["lr"] * u, m, v_
        out = jax.tree_util.tree_map(upd, ps, gs, ms, vs)
        pick = lambda i: jax.tree_util.tree_map(lambda o: o[i], out,  # noqa: E731
                                                is_leaf=lambda o: isinstance(o, tuple))
        return loss, pick(0), pick(1), pick(2)
    f = jax.jit(step)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return (lambda: jax.block_until_ready(f(params, zeros, zeros, 10.0))), None, None

def rms_norm(x, g):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + C.RMS_EPS) * g


def rotate_half(x):
    h = x.shape[-1] // 2
    return jnp.concatenate([-x[..., h:], x[..., :h]], -1)


def build_layer(name, small, wait):
    """The workloads of bench/wl_layers.c, or None."""
    r, c = C.rows_cols(small)
    if name in ("rmsnorm_fwd", "rmsnorm_bwd"):
        x, g, dy = rand((r, c), 1), rand((c,), 2, 0.1, 1.0), rand((r, c), 4)
        if name == "rmsnorm_fwd":
            f = jax.jit(rms_norm)
            return (lambda: wait(f(x, g))), None, None
        f = jax.jit(lambda x, g, dy: jax.vjp(rms_norm, x, g)[1](dy))
        return (lambda: wait(f(x, g, dy))), None, None
    if name == "swiglu":
        u = rand(C.swiglu_shape(small), 1)
        half = u.shape[1] // 2
        f = jax.jit(lambda u: jax.nn.silu(u[:, :half]) * u[:, half:])
        return (lambda: wait(f(u))), None, None
    if name == "rotary":
        xs, cs = C.rotary_shapes(small)
        x, cos, sin = rand(xs, 1), rand(cs, 2), rand(cs, 3)
        f = jax.jit(lambda x, cos, sin: x * cos + rotate_half(x) * sin)
        return (lambda: wait(f(x, cos, sin))), None, None
    if name == "groupnorm_silu":
        n, ch, hh, ww = C.groupnorm_shape(small)
        x, g, b = rand((n, ch, hh, ww), 1), rand((ch, 1, 1), 2, 0.1, 1.0), rand((ch, 1, 1), 3, 0.02)

        def gn(x, g, b):
            xg = x.reshape(n, C.GN_GROUPS, -1)
            mean = xg.mean(-1, keepdims=True)
            xc = xg - mean
            var = (xc * xc).mean(-1, keepdims=True)
            return jax.nn.silu((xc * jax.lax.rsqrt(var + C.GN_EPS)).reshape(x.shape) * g + b)
        f = jax.jit(gn)
        return (lambda: wait(f(x, g, b))), None, None
    if name == "ls_cross_entropy":
        n, k = C.ce_shape(small)
        logits = rand((n, k), 1)
        labels = jax.random.randint(jax.random.PRNGKey(2), (n,), 0, k)
        eps = C.LABEL_SMOOTHING

        def ce(lg):
            logp = jax.nn.log_softmax(lg, -1)
            target = jnp.where(jnp.arange(k)[None, :] == labels[:, None], 1 - eps + eps / k, eps / k)
            return -(target * logp).sum() / n
        f = jax.jit(jax.value_and_grad(ce))
        return (lambda: wait(f(logits))), None, None
    if name == "bce_logits":
        x, t = rand((r, c), 1), rand((r, c), 2, 0.5, 0.5)

        def bce(x):
            return (jnp.maximum(x, 0) - x * t + jnp.log(1 + jnp.exp(-jnp.abs(x)))).mean()
        f = jax.jit(jax.value_and_grad(bce))
        return (lambda: wait(f(x))), None, None
    return build_held_out(name, small, wait)


def build_text_ir(name, small, wait):
    """The held-out graphs of bench/wl_heldout.c (written in the text IR
    there), or None; io_bytes counts every input and output once."""
    S = C.heldout(name, small)
    if name == "rotary_bwd":
        t, h, d = S["T"], S["H"], S["D"]
        x, cs, sn, dy = rand((t, h, d), 1), rand((t, 1, d), 2), rand((t, 1, d), 3), rand((t, h, d), 4)

        def rot(x):
            return x * cs + jnp.concatenate((-x[..., d // 2:], x[..., :d // 2]), -1) * sn
        f = jax.jit(lambda x, dy: jax.vjp(rot, x)[1](dy))
        return (lambda: wait(f(x, dy))), nbytes((x, cs, sn, dy, x)), None
    if name in ("focal_loss", "softcap_zloss"):
        n, k = S["N"], S["K"]
        z = rand((n, k), 1)
        t = jax.random.randint(jax.random.PRNGKey(2), (n,), 0, k)

        def focal(z):
            lpt = jnp.take_along_axis(jax.nn.log_softmax(z, -1), t[:, None], 1)[:, 0]
            return -((1 - jnp.exp(lpt)) ** 2 * lpt).mean()

        def softcap(z):
            c = C.SOFTCAP * jnp.tanh(z / C.SOFTCAP)
            lse = jax.nn.logsumexp(c, -1)
            ce = lse - jnp.take_along_axis(c, t[:, None], 1)[:, 0]
            return ce.mean() + C.ZLOSS * (lse * lse).mean()
        f = jax.jit(jax.value_and_grad(focal if name == "focal_loss" else softcap))
        return (lambda: wait(f(z))), nbytes((z, t, z)), None
    if name == "moe_top2_lb":
        tk, e = S["T"], S["E"]
        lg, dg = rand((tk, e), 1), rand((tk, e), 2)

        def route(lg):
            p = jax.nn.softmax(lg, -1)
            _, idx = jax.lax.top_k(p, 2)
            sel = jax.nn.one_hot(idx, e).sum(1)
            kept = p * sel
            gates = kept / kept.sum(-1, keepdims=True)
            lb = (sel.mean(0) * p.mean(0)).sum() * C.LB_WEIGHT
            return (gates * dg).sum() + lb
        f = jax.jit(jax.grad(route))
        return (lambda: wait(f(lg))), nbytes((lg, dg, lg)), None
    if name == "sqrelu_mlp":
        n, d, ff = S["N"], S["D"], S["F"]
        x, w1, w2, dy = rand((n, d), 1), rand((d, ff), 2, 0.02), rand((ff, d), 3, 0.02), rand((n, d), 4)
        mlp = lambda x, w1, w2: jnp.square(jax.nn.relu(x @ w1)) @ w2  # noqa: E731
        f = jax.jit(lambda x, w1, w2, dy: jax.vjp(mlp, x, w1, w2)[1](dy))
        return ((lambda: wait(f(x, w1, w2, dy))), nbytes((x, w1, w2, dy, x, w1, w2)),
                3 * 2 * 2 * n * d * ff)
    if name == "lora_mlp":
        n, d, r = S["N"], S["D"], S["R"]
        x, w, dy = rand((n, d), 1), rand((d, d), 2), rand((n, d), 5)
        a, b = rand((d, r), 3, 0.02), rand((r, d), 4, 0.02)
        lora = lambda x, w, a, b: x @ w + C.LORA_SCALE * ((x @ a) @ b)  # noqa: E731
        f = jax.jit(lambda x, w, a, b, dy: jax.vjp(lambda x, a, b: lora(x, w, a, b), x, a, b)[1](dy))
        return ((lambda: wait(f(x, w, a, b, dy))), nbytes((x, w, a, b, dy, x, a, b)),
                C.lora_flops(S))
    if name == "convnext_tail":
        c, ff = S["C"], S["F"]
        x = rand((S["B"], S["H"], S["W"], c), 1)
        ps = [rand(s, 2 + i, 0.02) for i, s in enumerate(((c,), (c,), (c, ff), (ff,), (ff, c),
                                                          (c,), (c,)))]

        def tail(x, g, bt, w1, b1, w2, b2, gamma):
            h = jax.nn.gelu(layer_norm(x, g, bt, 1e-6) @ w1 + b1, approximate=False)
            return x + gamma * (h @ w2 + b2)
        f = jax.jit(tail)
        return (lambda: wait(f(x, *ps))), nbytes([x] + ps + [x]), 2 * 2 * x.size * ff
    if name == "resnet_block":
        b, c, h = S["B"], S["C"], S["H"]
        x, dy = rand((b, c, h, h), 1), rand((b, c, h, h), 8)
        shapes = ((c, c, 3, 3), (1, c, 1, 1), (1, c, 1, 1), (c, c, 3, 3), (1, c, 1, 1),
                  (1, c, 1, 1))
        ps = [rand(s, 2 + i, 0.1, 1.0 if i in (1, 4) else 0.0) for i, s in enumerate(shapes)]

        def bn(v, g, bt):
            mu = v.mean((0, 2, 3), keepdims=True)
            var = ((v - mu) ** 2).mean((0, 2, 3), keepdims=True)
            return (v - mu) * jax.lax.rsqrt(var + 1e-5) * g + bt

        def conv(v, w):
            return jax.lax.conv_general_dilated(v, w, (1, 1), ((1, 1), (1, 1)))

        def block(x, w1, g1, b1, w2, g2, b2):
            y = jax.nn.relu(bn(conv(x, w1), g1, b1))
            return jax.nn.relu(bn(conv(y, w2), g2, b2) + x)
        f = jax.jit(lambda x, ps, dy: jax.vjp(block, x, *ps)[1](dy))
        return ((lambda: wait(f(x, ps, dy))), nbytes([x] + ps + [dy, x] + ps),
                C.resnet_flops(S))
    if name == "llama_block":
        b, t, d, nh, ff = S["B"], S["T"], S["D"], S["H"], S["F"]
        e = d // nh
        x, dy, cs, sn = rand((b, t, d), 1), rand((b, t, d), 4), rand((t, 1, e), 2), rand((t, 1, e), 3)
        shapes = ((d,), (d, d), (d, d), (d, d), (d, d), (d,), (d, ff), (d, ff), (ff, d))
        ps = [rand(s, 5 + i, 0.02, 1.0 if len(s) == 1 else 0.0) for i, s in enumerate(shapes)]

        def rms(x, g):
            return x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + C.RMS_EPS) * g

        def rot(u):
            return u * cs + jnp.concatenate((-u[..., e // 2:], u[..., :e // 2]), -1) * sn

        def block(x, g1, wq, wk, wv, wo, g2, wg, wu, wd):
            n = rms(x, g1)
            q, k, v = ((n @ w).reshape(b, t, nh, e) for w in (wq, wk, wv))
            a = jax.nn.dot_product_attention(rot(q), rot(k), v, is_causal=True)
            h = x + a.reshape(b, t, d) @ wo
            n = rms(h, g2)
            return h + (jax.nn.silu(n @ wg) * (n @ wu)) @ wd
        f = jax.jit(lambda dy, *a: jax.vjp(block, *a)[1](dy))
        return ((lambda: wait(f(dy, x, *ps))), nbytes([x, cs, sn] + ps + [dy, x] + ps),
                C.llama_flops(S))
    if name == "gqa_attention":
        b, t, d, nh, g, e, kd = S["B"], S["T"], S["D"], S["H"], S["G"], S["E"], S["K"]
        x, dy = rand((b, t, d), 1), rand((b, t, d), 4)
        ps = [rand(sh, 5 + i, 0.02) for i, sh in enumerate(((d, d), (d, kd), (d, kd), (d, d)))]

        def gqa(x, wq, wk, wv, wo):
            q = (x @ wq).reshape(b, t, nh, e)
            k, v = ((x @ w).reshape(b, t, g, e) for w in (wk, wv))
            a = jax.nn.dot_product_attention(q, k, v, is_causal=True)
            return x + a.reshape(b, t, d) @ wo
        f = jax.jit(lambda dy, *a: jax.vjp(gqa, *a)[1](dy))
        return ((lambda: wait(f(dy, x, *ps))), nbytes([x] + ps + [dy, x] + ps), C.gqa_flops(S))
    if name == "mixer_block":
        b, p, c, sh, ff = S["B"], S["P"], S["C"], S["S"], S["F"]
        x, dy = rand((b, p, c), 1), rand((b, p, c), 4)
        shapes = ((c,), (c,), (p, sh), (sh,), (sh, p), (p,), (c,), (c,), (c, ff), (ff,), (ff, c),
                  (c,))
        ps = [rand(s_, 5 + i, 0.02, 1.0 if i in (0, 6) else 0.0) for i, s_ in enumerate(shapes)]

        def mixer(x, g1, be1, w1, b1, w2, b2, g2, be2, w3, b3, w4, b4):
            gelu = lambda z: jax.nn.gelu(z, approximate=False)  # noqa: E731
            n1 = jnp.swapaxes(layer_norm(x, g1, be1), 1, 2)
            x1 = x + jnp.swapaxes(gelu(n1 @ w1 + b1) @ w2 + b2, 1, 2)
            return x1 + gelu(layer_norm(x1, g2, be2) @ w3 + b3) @ w4 + b4
        f = jax.jit(lambda dy, *a: jax.vjp(mixer, *a)[1](dy))
        return ((lambda: wait(f(dy, x, *ps))), nbytes([x] + ps + [dy, x] + ps),
                C.mixer_flops(S))
    return None


def build_held_out(name, small, wait):
    """The held-out graphs of bench/wl_layers.c, or None."""
    if name in C.HELDOUT:
        return build_text_ir(name, small, wait)
    if name in ("instnorm_lrelu", "instnorm_lrelu_bwd"):
        xs = C.instnorm_shape(small)
        ch = xs[1]
        x, g, b = rand(xs, 1), rand((ch, 1, 1), 2, 0.1, 1.0), rand((ch, 1, 1), 3, 0.02)

        def inorm(x, g, b):
            mean = x.mean((2, 3), keepdims=True)
            xc = x - mean
            var = (xc * xc).mean((2, 3), keepdims=True)
            z = xc * jax.lax.rsqrt(var + C.IN_EPS) * g + b
            return jnp.where(z > 0, z, z * C.LRELU_SLOPE)
        if name == "instnorm_lrelu":
            f = jax.jit(inorm)
            return (lambda: wait(f(x, g, b))), None, None
        dy = rand(xs, 4)
        f = jax.jit(lambda x, g, b, dy: jax.vjp(inorm, x, g, b)[1](dy))
        return (lambda: wait(f(x, g, b, dy))), None, None
    if name == "t5_norm_residual":
        xs = C.t5_shape(small)
        x, res, w = rand(xs, 1), rand(xs, 2), rand((xs[1],), 3, 0.1, 1.0)

        def t5(x, res, w):
            h = x + res
            return h, h * jax.lax.rsqrt(jnp.mean(h * h, -1, keepdims=True) + C.RMS_EPS) * w
        f = jax.jit(t5)
        return (lambda: wait(f(x, res, w))), None, None
    if name in ("alibi_softmax", "alibi_softmax_bwd"):
        bs, nh, s, _ = C.alibi_shape(small)
        sc, slopes, mask = rand((bs, nh, s, s), 1), rand((nh, 1, 1), 2, 0.5, 0.5), \
            rand((bs, 1, 1, s), 3)
        pos = jnp.arange(s)
        dist = (pos[None, :] - pos[:, None]).astype(jnp.float32)
        causal = pos[None, :] <= pos[:, None]

        def alibi(sc):
            z = sc * C.ALIBI_SCALE + slopes * dist + mask
            return jax.nn.softmax(jnp.where(causal, z, -jnp.inf), -1)
        if name == "alibi_softmax":
            f = jax.jit(alibi)
            return (lambda: wait(f(sc))), None, None
        dy = rand((bs, nh, s, s), 4)
        f = jax.jit(lambda sc, dy: jax.vjp(alibi, sc)[1](dy))
        return (lambda: wait(f(sc, dy))), None, None
    if name == "geglu_bwd":
        u = rand(C.geglu_shape(small), 1)
        half = u.shape[1] // 2
        dy = rand((u.shape[0], half), 4)
        geglu = lambda u: jax.nn.gelu(u[:, :half], approximate=True) * u[:, half:]  # noqa: E731
        f = jax.jit(lambda u, dy: jax.vjp(geglu, u)[1](dy))
        return (lambda: wait(f(u, dy))), None, None
    if name == "layerscale_droppath":
        xs = C.layerscale_shape(small)
        fb, g, x = rand(xs, 1), rand((xs[2],), 2, 0.02), rand(xs, 3)
        u, dy = rand((xs[0], 1, 1), 4, 0.5, 0.5), rand(xs, 5)

        def ls(fb, g):
            keep = (u < C.DROP_PATH_KEEP).astype(jnp.float32) / C.DROP_PATH_KEEP
            return x + fb * g * keep
        f = jax.jit(lambda fb, g, dy: jax.vjp(ls, fb, g)[1](dy))
        return (lambda: wait(f(fb, g, dy))), None, None
    return None


def build(name, small):
    """(fn, io_bytes, gemm_flops): fn() runs the workload once and waits."""
    r, c = C.rows_cols(small)
    wait = jax.block_until_ready
    if name in ("layernorm_fwd", "layernorm_bwd"):
        x, g, b, dy = rand((r, c), 1), rand((c,), 2, 0.1, 1.0), rand((c,), 3, 0.02), rand((r, c), 4)
        if name == "layernorm_fwd":
            f = jax.jit(layer_norm)
            return (lambda: wait(f(x, g, b))), None, None
        f = jax.jit(lambda x, g, b, dy: jax.vjp(layer_norm, x, g, b)[1](dy))
        return (lambda: wait(f(x, g, b, dy))), None, None
    if name in ("softmax_fwd", "softmax_bwd"):
        x, dy = rand((r, c), 1), rand((r, c), 4)
        sm = lambda x: jax.nn.softmax(x, -1)  # noqa: E731
        if name == "softmax_fwd":
            f = jax.jit(sm)
            return (lambda: wait(f(x))), None, None
        f = jax.jit(lambda x, dy: jax.vjp(sm, x)[1](dy))
        return (lambda: wait(f(x, dy))), None, None
    if name == "bias_gelu":
        x, b = rand((r, c), 1), rand((c,), 2, 0.02)
        f = jax.jit(lambda x, b: gelu(x + b, True))
        return (lambda: wait(f(x, b))), None, None
    if name == "bias_dropout_residual_ln":
        x, b, res = rand((r, c), 1), rand((c,), 2, 0.02), rand((r, c), 3)
        g, beta, key = rand((c,), 4, 0.1, 1.0), rand((c,), 5, 0.02), jax.random.PRNGKey(7)
        f = jax.jit(lambda x, b, res, g, beta, key: layer_norm(
            dropout(key, x + b, P_DROP) + res, g, beta))
        return (lambda: wait(f(x, b, res, g, beta, key))), None, None
    if name == "cross_entropy":
        n, k = C.ce_shape(small)
        logits = rand((n, k), 1)
        labels = jax.random.randint(jax.random.PRNGKey(2), (n,), 0, k)

        def ce(lg):
            lse = jax.nn.logsumexp(lg, -1)
            return (lse - jnp.take_along_axis(lg, labels[:, None], -1)[:, 0]).mean()
        f = jax.jit(jax.value_and_grad(ce))
        return (lambda: wait(f(logits))), None, None
    layer = build_layer(name, small, wait)
    if layer:
        return layer
    if name == "adamw":
        shapes = C.adamw_shapes(small)
        ps = [rand(s, i, 0.02) for i, s in enumerate(shapes)]
        gs = [rand(s, 100 + i) for i, s in enumerate(shapes)]
        ms = [rand(s, 200 + i, 0.02) for i, s in enumerate(shapes)]
        vs = [rand(s, 300 + i, 0.5, 0.5) for i, s in enumerate(shapes)]
        wds = [0.01 if len(s) == 2 else 0.0 for s in shapes]

        def step(ps, gs, ms, vs, t):
            out = []
            for p, g, m, v, wd in zip(ps, gs, ms, vs, wds):
                m = 0.9 * m + 0.1 * g
                v = 0.999 * v + 0.001 * g * g
                u = (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t)) + 1e-8) + wd * p
                out.append((p - 1e-3 * u, m, v))
            return out
        f = jax.jit(step)
        return (lambda: wait(f(ps, gs, ms, vs, 10.0))), None, None
    if name == "train_step":
        return train_step(small)
    bsz, s, h, nh, ff = C.model_cfg(name, small)
    x, w = rand((bsz, s, h), 1), block_params(h, ff)
    if name == "bert_layer":
        def bert(x, w):
            a = mha(x @ w["qkv_w"] + w["qkv_b"], bsz, s, h, nh, False) @ w["proj_w"] + w["proj_b"]
            x1 = layer_norm(x + a, w["ln1_g"], w["ln1_b"], 1e-12)
            f2 = gelu(x1 @ w["fc_w"] + w["fc_b"], False) @ w["out_w"] + w["out_b"]
            return layer_norm(x1 + f2, w["ln2_g"], w["ln2_b"], 1e-12)
        f = jax.jit(bert)
        return (lambda: wait(f(x, w))), 2 * nbytes(x) + nbytes(w), block_flops(bsz, s, h, ff)
    dy, key = rand((bsz, s, h), 4), jax.random.PRNGKey(9)

    def gpt(x, w, key):
        k1, k2, k3 = jax.random.split(key, 3)
        a = layer_norm(x, w["ln1_g"], w["ln1_b"])
        a = mha(a @ w["qkv_w"] + w["qkv_b"], bsz, s, h, nh, True, k1, P_DROP)
        x = x + dropout(k2, a @ w["proj_w"] + w["proj_b"], P_DROP)
        m = gelu(layer_norm(x, w["ln2_g"], w["ln2_b"]) @ w["fc_w"] + w["fc_b"], True)
        return x + dropout(k3, m @ w["out_w"] + w["out_b"], P_DROP)

    def fwd_bwd(x, w, key, dy):
        y, vjp = jax.vjp(lambda x, w: gpt(x, w, key), x, w)
        return y, vjp(dy)
    f = jax.jit(fwd_bwd)
    io = 4 * nbytes(x) + 2 * nbytes(w)  # x, dy, params in; y, dx, dparams out
    return (lambda: wait(f(x, w, key, dy))), io, 3 * block_flops(bsz, s, h, ff)


def machine():
    n = max(4 * C.llc_bytes(), 48 << 20) // 12
    b, c = jnp.ones(n), jnp.full(n, 2.0)
    f = jax.jit(lambda b, c: b + 3.0 * c)
    med, _ = C.time_fn(lambda: jax.block_until_ready(f(b, c)), 7)
    triad = 12 * n / med / 1e9
    m1, m2 = rand((2048, 2048), 1), rand((2048, 2048), 2)
    mm = jax.jit(lambda a, b: a @ b)
    med, _ = C.time_fn(lambda: jax.block_until_ready(mm(m1, m2)), 5)
    sgemm = 2 * 2048 ** 3 / med / 1e9
    fw = "jax " + jax.__version__
    C.machine_line(triad, sgemm, os.cpu_count(), fw, 12 * n)
    return triad, sgemm, fw


def main():
    a = C.parse_args(MODES)
    triad, sgemm, fw = machine()
    for name in a.workloads:
        for mode in a.modes:
            C.progress("%s: %s" % (name, mode))
            try:
                fn, io, flops = build(name, a.small)
                med, mn = C.time_fn(fn, a.runs)
            except Exception as e:  # a peer failing is reported, not fatal
                C.error_line(name, mode, a.small, "%s: %s" % (type(e).__name__, e))
                continue
            C.result_line(name, mode, a.small, med, mn, a.runs, triad, fw, io, flops, sgemm)


if __name__ == "__main__":
    main()
