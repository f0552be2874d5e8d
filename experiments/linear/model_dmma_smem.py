"""Shared-memory models of the float64 tensor-core kernels (CPU only; docs/linear.md, "dmma").

* ``old_kernel_model``: linear_wide<double,128,128,16,4,2,3,false> (v6), the wavefronts of
  its accesses per block and k tile by the bank rule (64-bit per half warp, 128-bit per quarter
  warp) and, for the cp.async stores, by one wavefront per 128-byte segment touched (rows padded
  to 160 / 1056 bytes straddle lines); compared with ncu's counts at 4096^3.
* ``run``: an emulation of linear_dmma with the kernel's index formulas (swizzled cp.async,
  fragment lane offsets, the rolled fragment loads, one barrier per k tile), all warps in
  lockstep, cp.async groups landing only at the wait_group that needs them; returns the max error
  against x @ w of one output tile and the bank model's excess wavefronts.

Run: ``python3 experiments/linear/model_dmma_smem.py`` (a few minutes).
"""
import numpy as np


def swz_k(r): return 2 * (r & 3)
def swz_n(k): return 2 * (k & 3)

def run(BM, BN, WM, WN, S, MMA_K, KMAJ, M, N, K, m0=0, n0=0, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((M, K)); w = rng.standard_normal((K, N))
    T = 32 * WM * WN; BK = 16; q = MMA_K // 4; G = BK // MMA_K
    wm, wn = BM // WM, BN // WN; MI, NI = wm // 16, wn // 8
    a_elems, b_elems = BM * BK, BN * BK; stage = a_elems + b_elems
    smem = np.full(S * stage, np.nan)
    pending = []
    conflicts = {"cp.async": 0, "lds": 0}; wavefronts = {"cp.async": 0, "lds": 0}
    k_tiles = -(-K // BK)
    tile_inside = m0 + BM <= M and n0 + BN <= N

    def phase_cost(addrs_bytes, kind):
        lines_per_bank = {}
        for a in addrs_bytes:
            for b in range(a // 4, a // 4 + (2 if kind == "lds" else 4)):
                lines_per_bank.setdefault(b % 32, set()).add(a // 128 if kind == "cp.async" else a // 8)
        need = max(len(v) for v in lines_per_bank.values())
        return need

    def copy_tile(slot_base, rows, row_chunks, src_fn, swz, rows_left, cols_left):
        rpp = T // row_chunks; writes = []
        per_instr = {}
        for tid in range(T):
            r0, c = tid // row_chunks, tid % row_chunks
            for i in range(rows // rpp):
                r = r0 + i * rpp
                dst = slot_base + r * row_chunks * 2 + 2 * (c ^ swz(r0))
                assert swz(r0) == swz(r), "one swizzle per thread"
                ok = r < rows_left and 2 * c < cols_left
                vals = src_fn(r, 2 * c) if ok else (0.0, 0.0)
                writes.append((dst, vals)); per_instr.setdefault(i, {}).setdefault(tid // 32, []).append((tid % 32, dst * 8))
        for i, warps in per_instr.items():
            for wp, lanes in warps.items():
                lanes.sort()
                for ph in range(4):
                    addrs = [a for l, a in lanes if l // 8 == ph]
                    if addrs:
                        need = phase_cost(addrs, "cp.async"); wavefronts["cp.async"] += need; conflicts["cp.async"] += need - 1
        return writes

    def load(kt, slot):
        grp = []
        if kt < k_tiles:
            k0 = kt * BK; base = slot * stage
            full = tile_inside and k0 + BK <= K
            rows_m = min(M - m0, BM); cols_n = min(N - n0, BN); cols_k = min(K - k0, BK)
            grp += copy_tile(base, BM, BK // 2, lambda r, c: (x[m0 + r, k0 + c], x[m0 + r, k0 + c + 1]), swz_k,
                             BM if full else rows_m, BK if full else cols_k)
            if KMAJ:
                grp += copy_tile(base + a_elems, BN, BK // 2, lambda r, c: (w[k0 + c, n0 + r], w[k0 + c + 1, n0 + r]), swz_k,
                                 BN if full else cols_n, BK if full else cols_k)
            else:
                grp += copy_tile(base + a_elems, BK, BN // 2, lambda r, c: (w[k0 + r, n0 + c], w[k0 + r, n0 + c + 1]), swz_n,
                                 BK if full else cols_k, BN if full else cols_n)
        pending.append(grp)

    def wait(n):
        while len(pending) > n:
            for dst, (v0, v1) in pending.pop(0):
                smem[dst] = v0; smem[dst + 1] = v1

    # lane offsets
    def lanes(warp):
        wr, wc = (warp // WN) * wm, (warp % WN) * wn
        out = []
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            a_lane = [(wr + g) * BK + 4 * (c ^ (g & 3)) + t for c in range(4)]
            if KMAJ: b_lane = [(wc + g) * BK + 4 * (c ^ (g & 3)) + t for c in range(4)]
            else: b_lane = [t * BN + wc + ((8 * p + g) ^ (4 * t)) for p in range(2)]
            out.append((a_lane, b_lane))
        return out
    L = [lanes(wp) for wp in range(T // 32)]

    def addr_a(lo, i, v, group, s): return s + lo[0][group * q + v // 2] + (16 * i + 8 * (v % 2)) * BK
    def addr_b(lo, j, v, group, s):
        if KMAJ: return s + a_elems + lo[1][group * q + v] + 8 * j * BK
        return s + a_elems + lo[1][j & 1] + 4 * (group * q + v) * BN + 16 * (j >> 1)

    def lds(addr_fn):  # one LDS.64 instruction over all warps: values + bank model
        vals = []
        for wp in range(T // 32):
            addrs = [addr_fn(L[wp][lane]) for lane in range(32)]
            for half in range(2):
                need = phase_cost([a * 8 for a in addrs[16 * half:16 * half + 16]], "lds")
                wavefronts["lds"] += need; conflicts["lds"] += need - 1
            vals.append([smem[a] for a in addrs])
        return vals

    A = np.zeros((T // 32, MI, 2 * q, 32)); B = np.zeros((T // 32, NI, q, 32)); acc = np.zeros((T // 32, MI, NI, 4, 32))
    def load_a(s, i, group):
        for v in range(2 * q): A[:, i, v] = lds(lambda lo: addr_a(lo, i, v, group, s))
    def load_b(s, j, group):
        for v in range(q): B[:, j, v] = lds(lambda lo: addr_b(lo, j, v, group, s))
    def mma(i, j):
        for wp in range(T // 32):
            a = np.zeros((16, MMA_K)); b = np.zeros((MMA_K, 8))
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for v in range(2 * q): a[g + 8 * (v % 2), t + 4 * (v // 2)] = A[wp, i, v, lane]
                for v in range(q): b[t + 4 * v, g] = B[wp, j, v, lane]
            d = a @ b
            for lane in range(32):
                g, t = lane >> 2, lane & 3
                for r in range(4): acc[wp, i, j, r, lane] += d[g + 8 * (r // 2), 2 * t + r % 2]

    for s_ in range(S): load(s_, s_)
    wait(S - 1)
    for i in range(MI): load_a(0, i, 0)
    for j in range(NI): load_b(0, j, 0)
    slot = 0
    for kt in range(k_tiles):
        nxt = 0 if slot + 1 == S else slot + 1
        for group in range(G):
            last = group == G - 1
            if last: wait(S - 2)
            src = (nxt if last else slot) * stage; sg = 0 if last else group + 1
            for i in range(MI):
                for j in range(NI):
                    mma(i, j)
                    if i == MI - 1: load_b(src, j, sg)
                load_a(src, i, sg)
                if last and i == 0: load(kt + S, slot)
        slot = nxt
    wait(0)
    out = np.full((M, N), np.nan)
    for wp in range(T // 32):
        wr, wc = (wp // WN) * wm, (wp % WN) * wn
        for lane in range(32):
            g, t = lane >> 2, lane & 3
            for i in range(MI):
                for j in range(NI):
                    for r in range(4):
                        m, n = m0 + wr + 16 * i + g + 8 * (r // 2), n0 + wc + 8 * j + 2 * t + r % 2
                        if m < M and n < N: out[m, n] = acc[wp, i, j, r, lane]
    ref = x[m0:m0 + BM, :] @ w[:, n0:n0 + BN]
    got = out[m0:m0 + BM, n0:n0 + BN]
    err = np.nanmax(np.abs(got - ref[:got.shape[0], :got.shape[1]]))
    assert not np.isnan(got).any(), "unwritten or NaN outputs"
    return err, conflicts, wavefronts


def old_kernel_model():
    """Per block and k tile of linear_wide<double,128,128,16,4,2,3,false> (v6): wavefronts by the bank
    rule, and the cp.async stores by a one-wavefront-per-128-byte-segment rule."""
    BM, BN, BK, T = 128, 128, 16, 256
    a_ld, b_ld = BK + 4, BN + 4
    a_elems = BM * a_ld
    def bank_cost(addrs, width):
        per = {}
        for a in addrs:
            for b in range(a // 4, a // 4 + width // 4): per.setdefault(b % 32, set()).add(a // 128)
        return max(len(v) for v in per.values())
    def seg_cost(addrs):
        return len({s for a in addrs for s in range(a // 128, (a + 15) // 128 + 1)})
    res = {"cp.async ideal": 0, "cp.async bank": 0, "cp.async segments": 0, "lds ideal": 0, "lds bank": 0}
    def copy(rows, cols, ld, base):
        rc = cols // 2
        for i in range(rows * rc // T):
            for wp in range(T // 32):
                addrs = []
                for lane in range(32):
                    c = wp * 32 + lane + i * T; r, ch = c // rc, c % rc
                    addrs.append((base + r * ld + 2 * ch) * 8)
                for ph in range(4):
                    q = addrs[8 * ph: 8 * ph + 8]
                    res["cp.async ideal"] += 1; res["cp.async bank"] += bank_cost(q, 16); res["cp.async segments"] += seg_cost(q)
    copy(BM, BK, a_ld, 0); copy(BK, BN, b_ld, a_elems)
    WM, WN = 4, 2; wm, wn = 32, 64
    for wp in range(8):
        wr, wc = (wp // WN) * wm, (wp % WN) * wn
        loads = []
        for i in range(2):
            for v in range(8): loads.append([((wr + (l >> 2)) * a_ld + (l & 3) + (16 * i + 8 * (v % 2)) * a_ld + 4 * (v // 2)) * 8 for l in range(32)])
        for j in range(8):
            for v in range(4): loads.append([(a_elems + (l & 3) * b_ld + wc + (l >> 2) + (4 * v) * b_ld + 8 * j) * 8 for l in range(32)])
        for addrs in loads:
            for h in range(2):
                res["lds ideal"] += 1; res["lds bank"] += bank_cost(addrs[16 * h:16 * h + 16], 8)
    print(res)
    ideal = res["cp.async ideal"] + res["lds ideal"]
    print("ideal wavefronts per block and k tile", ideal, "; excess under the segment rule:", res["cp.async segments"] - res["cp.async ideal"],
          f"({(res['cp.async segments'] - res['cp.async ideal']) / (ideal + res['cp.async segments'] - res['cp.async ideal']):.1%} of the total)")
    print("ncu: 306,233,344 wavefronts, 37,797,888 excess over 1024 blocks x 256 k tiles =", 306233344 / 262144, "and", 37797888 / 262144, "per block and k tile")


if __name__ == "__main__":
    old_kernel_model()
    # (BM, BN, WARPS_M, WARPS_N, STAGES, MMA_K) and its weight layouts (64x128 copies a row-major
    # weight in passes of 2 k rows, which its swizzle rules out: K-major only).
    tiles = [((128, 64, 2, 2, 3, 8), (False, True)), ((128, 64, 2, 2, 3, 16), (False, True)),
             ((128, 64, 2, 2, 4, 8), (False, True)), ((128, 128, 2, 4, 3, 8), (False, True)),
             ((128, 128, 4, 2, 3, 8), (False, True)), ((64, 128, 2, 2, 3, 8), (True,))]
    for tile, layouts in tiles:
        for kmajor in layouts:
            # a full tile; an edge tile with ragged M, N and K; fewer k tiles than stages
            for m, n, k, m0, n0 in [(tile[0], tile[1], 64, 0, 0), (tile[0] + 72, tile[1] + 36, 50, tile[0], tile[1]),
                                    (tile[0] + 2, 70, 18, 0, 0)]:
                err, excess, total = run(*tile, kmajor, m, n, k, m0, n0)
                print(tile, "K-major" if kmajor else "row-major", (m, n, k, m0, n0), f"max err {err:.1e}",
                      "excess wavefronts", excess, "of", total, flush=True)
