# SPDX-License-Identifier: Apache-2.0
"""Plain NumPy references of the apexx ops (docs/ops.md), written from the
formulas, independent of libapexx. Float results are float64 over the
storage-rounded inputs (with the magnitude of the terms for the tolerance);
copies are exact."""
import numpy as np


def tilepack(f, idx, t):
    B, C, H, W = f.shape
    gw = W // t
    out = np.empty((B, idx.shape[1], C, t, t), f.dtype)
    for b in range(B):
        for k, i in enumerate(idx[b]):
            ty, tx = divmod(int(i), gw)
            out[b, k] = f[b, :, ty * t:(ty + 1) * t, tx * t:(tx + 1) * t]
    return out


def tileunpack(base, packed, origins, levels, mode, a):
    """origins [B,K,2] (y0,x0); key (level, k) ascending; override: last
    write wins; blend: nested (1-a)*cur + a*tile (returns value, magnitude)."""
    out = base.astype(np.float64).copy()
    mag = np.abs(out)
    B, K = packed.shape[:2]
    t = packed.shape[-1]
    for b in range(B):
        keys = [((levels[b, k] if levels is not None else 0), k) for k in range(K)]
        for _, k in sorted(keys):
            y0, x0 = origins[b, k]
            tile = packed[b, k].astype(np.float64)
            sl = (b, slice(None), slice(y0, y0 + t), slice(x0, x0 + t))
            if mode == "override":
                out[sl] = tile
                mag[sl] = np.abs(tile)
            else:
                out[sl] = (1 - a) * out[sl] + a * tile
                mag[sl] = (1 - a) * mag[sl] + a * np.abs(tile)
    return out, mag


def origins_of(idx, t, W):
    gw = W // t
    return np.stack([(idx // gw) * t, (idx % gw) * t], axis=-1)


def fused(f, idx, t, vs, vb, gs, gb):
    x = f.astype(np.float64)
    out, mag = x.copy(), np.abs(x)
    gw = f.shape[3] // t
    for b in range(f.shape[0]):
        for i in idx[b]:
            ty, tx = divmod(int(i), gw)
            sl = (b, slice(None), slice(ty * t, (ty + 1) * t), slice(tx * t, (tx + 1) * t))
            v = x[sl] * vs + vb
            g = x[sl] * gs + gb
            out[sl] = v * np.maximum(g, 0)
            mag[sl] = (np.abs(x[sl] * vs) + abs(vb)) * (np.abs(x[sl] * gs) + abs(gb))
    return out, mag


def _sanitise_proxy(p):
    p = p.astype(np.float64)
    p = np.where(np.isnan(p), 0.0, p)
    p = np.where(np.isposinf(p), 1.0, p)
    return np.where(np.isneginf(p), 0.0, p)


def softplus(x):
    return x if x > 20 else np.log1p(np.exp(x))


def fusiongate_alpha(b, u, bw, uw, bias):
    wb = softplus(float(np.float32(bw)))
    wu = softplus(float(np.float32(uw)))
    z = wb * _sanitise_proxy(b) + wu * _sanitise_proxy(u) + bias
    a = 1 / (1 + np.exp(-z))
    if a.ndim == 3:
        a = a[:, None]
    return a, np.abs(a)


def fusiongate_fuse(base, detail, alpha):
    x, d = base.astype(np.float64), detail.astype(np.float64)
    a = alpha.astype(np.float64)
    if a.ndim == 3:
        a = a[:, None]
    return x + a * (d - x), np.abs(x) + np.abs(a) * (np.abs(d) + np.abs(x))


def tilessm_scan(tok, decay, ig, og, sb, init, clamp, direction, merge, gate):
    """docs/ops.md, tilessm_scan in float64 (returns y, final_state, magnitude of y)."""
    lim = abs(clamp)
    x = tok.astype(np.float64)
    x = np.where(np.isnan(x), 0.0, x)
    x = np.clip(x, -lim, lim)
    d = np.clip(decay.astype(np.float64), 1e-6, 1 - 1e-6)
    ig, og, sb = (v.astype(np.float64) for v in (ig, og, sb))
    B, K, C = tok.shape

    def run(xs, s0):
        s = s0.copy()
        ys, ms = np.empty_like(xs), np.empty_like(xs)
        m = np.abs(s0)
        for k in range(xs.shape[1]):
            drv = ig * xs[:, k] + sb
            s = d * s + (1 - d) * drv
            m = d * m + (1 - d) * (np.abs(ig * xs[:, k]) + np.abs(sb))
            ys[:, k] = og * s
            ms[:, k] = np.abs(og) * m
        return ys, ms, s

    if init is None:
        i_f = i_b = np.zeros((B, C))
    elif init.ndim == 2:
        i_f = i_b = init.astype(np.float64)
    else:
        i_f, i_b = init[:, 0].astype(np.float64), init[:, 1].astype(np.float64)
    if direction == "forward":
        y, m, s = run(x, i_f)
        return y, s, m
    if direction == "backward":
        y, m, s = run(x[:, ::-1], i_b)
        return y[:, ::-1], s, m[:, ::-1]
    yf, mf, sf = run(x, i_f)
    yb, mb, sb_ = run(x[:, ::-1], i_b)
    yb, mb = yb[:, ::-1], mb[:, ::-1]
    if merge == "sum":
        y, m = yf + yb, mf + mb
    elif merge == "avg":
        y, m = 0.5 * (yf + yb), 0.5 * (mf + mb)
    else:
        g = np.full(C, 0.5) if gate is None else np.clip(gate.astype(np.float64), 0, 1)
        g = g.reshape(-1, 1, C) if g.ndim == 3 else g
        y, m = g * yf + (1 - g) * yb, g * mf + (1 - g) * mb
    return y, np.stack([sf, sb_], axis=1), m


def gather(src, dim, index):
    out = np.empty(index.shape, src.dtype)
    for pos in np.ndindex(*index.shape):
        at = list(pos)
        at[dim] = int(index[pos])
        out[pos] = src[tuple(at)]
    return out


def scatter_add(self, dim, index, src):
    """Exact float64 sums (fp32 accumulation rounded once is within it)."""
    out = self.astype(np.float64) if self.dtype.kind == "f" else self.astype(np.int64)
    mag = np.abs(out.astype(np.float64))
    for pos in np.ndindex(*index.shape):
        dst = list(pos)
        dst[dim] = int(index[pos])
        out[tuple(dst)] += src[pos]
        mag[tuple(dst)] += abs(float(src[pos]))
    return out, mag


def hilbert_d(x, y, n):
    d = 0
    s = n // 2
    while s > 0:
        rx = 1 if (x & s) else 0
        ry = 1 if (y & s) else 0
        d += s * s * ((3 * rx) ^ ry)
        if ry == 0:
            if rx == 1:
                x = (s - 1) - (x & (s - 1))
                y = (s - 1) - (y & (s - 1))
            x, y = y, x
        s //= 2
    return d


def tile_order(ids, gh, gw, mode):
    n = 1
    while n < max(gh, gw):
        n *= 2
    def key(i):
        ty, tx = divmod(int(i), gw)
        return {"hilbert": hilbert_d(tx, ty, n), "l2r": (ty, tx), "r2l": (ty, gw - 1 - tx),
                "u2d": (tx, ty), "d2u": (tx, gh - 1 - ty),
                "multi_direction": 2 * (ty * gw + tx * gh) + gw + gh - 2}[mode]
    order = sorted(range(len(ids)), key=lambda p: (key(ids[p]), p))
    return ids[order]
