# One-off generator for the .npy files beside it (see README.md).
# Needs Python 3 and NumPy; nothing at test time does.
import numpy as np

f32 = np.float32
# Multiples of 0.5 in [-2, 2]: every product and sum below is exact in f32,
# so any summation order gives the same bits.
x = np.array([[1.0, -0.5, 2.0, 0.0], [-1.5, 1.0, 0.5, -2.0]], f32)
w1 = (np.arange(32).reshape(4, 8) % 9 - 4).astype(f32) * f32(0.5)
b1 = np.array([0.5, -1.0, 0.0, 1.5, -0.5, 1.0, -2.0, 0.5], f32)
w2 = ((np.arange(24).reshape(8, 3) * 5) % 7 - 3).astype(f32) * f32(0.5)
b2 = np.array([1.0, -0.5, 0.0], f32)
for name, a in [("x", x), ("w1", w1), ("b1", b1), ("w2", w2), ("b2", b2)]:
    np.save(name + ".npy", a)

# The expected outputs of mlp.loom, computed in float64 and rounded once.
h = x.astype(np.float64) @ w1 + b1
a = np.maximum(h, 0.0)
logits = a @ w2 + b2
np.save("expected_logits.npy", logits.astype(f32))
np.save("expected_positive.npy", logits > 0)
np.save("expected_total.npy", np.array(logits.sum(), f32))
# An input of the wrong dtype, for the error test.
np.save("x_f64.npy", x.astype(np.float64))
