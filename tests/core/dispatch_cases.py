"""The problem grid of the dispatch snapshot (``tests/data/dispatch.txt``): shapes, dtypes,
layouts and both reference devices, for every op. Plain data (dicts of numbers, strings,
lists and None)."""
from __future__ import annotations

import itertools

import numpy as np

DTYPES = ("float16", "bfloat16", "float32", "float64")
DEVICES = ("H200", "A100")


def value(v):
    """A scalar kernel argument as exact, typed JSON text."""
    if isinstance(v, (np.floating, float)):
        return f"{np.dtype(type(v)).name}:{float(v).hex()}"
    return f"{np.dtype(type(v)).name}:{int(v)}"


def _contiguous(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def softmax_cases():
    cases = []
    lengths = (1, 2, 3, 7, 8, 16, 31, 32, 100, 128, 255, 256, 257, 777, 1000, 1024, 2048, 3000, 4096, 8192,
               12288, 16384, 32768, 50000, 65536, 100000, 131072, 200000, 262144, 500000, 1 << 20, 3_000_000,
               1 << 22, 1 << 26)
    for device, dtype, log in itertools.product(DEVICES, DTYPES, (False, True)):
        base = dict(device=device, dtype=dtype, log=log)
        for length in lengths:
            for rows in (1, 16, 1000, 65536):
                if rows * length > 1 << 27:
                    continue
                cases.append(dict(base, shape=[rows, length], strides=[length, 1], axes=[1]))
        for rows, length in ((16384, 4096), (4096, 100), (671088, 100), (8192, 8192), (3, 50000)):
            # the last axis of a transposed view, every other column, a negative stride
            cases.append(dict(base, shape=[rows, length], strides=[1, rows], axes=[1]))
            cases.append(dict(base, shape=[rows, length], strides=[2 * length, 2], axes=[1]))
            cases.append(dict(base, shape=[rows, length], strides=[length, -1], axes=[1]))
        for length, inner in itertools.product((2, 16, 100, 777, 2048, 4096, 16384, 100000, 1 << 20, 1 << 22),
                                               (1, 8, 16, 100, 256, 4096, 4097, 1 << 20)):
            if length * inner > 1 << 27:
                continue
            cases.append(dict(base, shape=[length, inner], strides=[inner, 1], axes=[0]))
        # short columns: vectors where they are aligned (every rung); where the column count or the
        # outer stride is off the vector, shifted vectors (2- and 4-byte types, up to 8 rows), else a
        # thread a column
        for length, inner in itertools.product((3, 6, 9), (64, 3_000_000, 3_000_001)):
            cases.append(dict(base, shape=[length, inner], strides=[inner, 1], axes=[0]))
        cases.append(dict(base, shape=[5, 9, 64], strides=[9 * 64 + 1, 64, 1], axes=[1]))
        for outer, length, inner in ((64, 4096, 256), (2, 3, 4), (8, 1000, 33), (1, 16384, 4096)):
            cases.append(dict(base, shape=[outer, length, inner], strides=list(_contiguous((outer, length, inner))),
                              axes=[1]))
            cases.append(dict(base, shape=[outer, length, inner], strides=list(_contiguous((outer, length, inner))),
                              axes=[0, 2]))
        for shape in ((8192, 8192), (1, 1), (5, 7), (4096, 4096)):
            cases.append(dict(base, shape=list(shape), strides=list(_contiguous(shape)), axes=[0, 1]))
    return cases


def linear_cases():
    cases = []
    problems = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 11008), (8192, 28672),
                (5120, 13824), (100, 60), (64, 64), (8, 8), (4096, 1), (1, 8), (0, 64))
    ms = (1, 2, 4, 5, 8, 16, 17, 32, 33, 64, 65, 128, 512, 1000, 4096, 16384)
    for device, dtype in itertools.product(DEVICES, DTYPES):
        for (k, n), m in itertools.product(problems, ms):
            if m * max(k, n) > 1 << 28:
                continue
            base = dict(device=device, dtype=dtype, x_shape=[m, k], x_strides=[k, 1], x_offset=0, bias_stride=1)
            cases.append(dict(base, w_shape=[k, n], w_strides=[n, 1], w_offset=0))  # (K, N)
            cases.append(dict(base, w_shape=[k, n], w_strides=[1, k], w_offset=0))  # (N, K).T
            if (k, n) == (4096, 4096) or m in (16, 512):
                cases.append(dict(base, w_shape=[k, n], w_strides=[2 * n, 2], w_offset=0))  # every other column
                cases.append(dict(base, w_shape=[k, n], w_strides=[n, 1], w_offset=0, bias_stride=None))
                cases.append(dict(base, w_shape=[k, n], w_strides=[n, 1], w_offset=0, bias_stride=3))
                cases.append(dict(base, x_shape=[m, k], x_strides=[k + 8, 1], w_shape=[k, n], w_strides=[1, k],
                                  w_offset=0))  # x rows padded
                cases.append(dict(base, x_offset=1, w_shape=[k, n], w_strides=[n, 1], w_offset=0))  # misaligned x
                cases.append(dict(base, w_shape=[k, n], w_strides=[n, 1], w_offset=3))  # misaligned weight
                cases.append(dict(base, x_shape=[m, k], x_strides=[k, 2], w_shape=[k, n], w_strides=[n, 1],
                                  w_offset=0))  # x with a k stride
        for m, k, n in itertools.product((1, 16, 64, 65, 200, 1000, 4096), (0, 4096), (64, 4096, 12288)):
            base = dict(device=device, dtype=dtype, x_shape=[m, k], x_offset=0, bias_stride=1, w_shape=[k, n])
            cases.append(dict(base, x_strides=[0, 1], w_strides=[n, 1], w_offset=0))  # broadcast rows
            cases.append(dict(base, x_strides=[k, 1], w_strides=[1, k], w_offset=0))
            cases.append(dict(base, x_strides=[k, 1], x_offset=1, w_strides=[1, k], w_offset=0))
        for m, n in itertools.product((65, 96, 129, 192, 256, 300, 384, 640, 768, 1536, 2048, 3072), (256, 1024, 2048,
                                                                                                          3072, 5120)):
            cases.append(dict(device=device, dtype=dtype, x_shape=[m, 4096], x_strides=[4096, 1], x_offset=0,
                              w_shape=[4096, n], w_strides=[n, 1], w_offset=0, bias_stride=1))
        # points where the H200 picks the 64x256, 64x128 and mma tiles (found by a dense scan)
        for m, n in ((130, 8512), (130, 17152), (385, 4672), (770, 4672), (65, 64), (65, 16960), (1000, 20000)):
            base = dict(device=device, dtype=dtype, x_shape=[m, 4096], x_offset=0, bias_stride=1, w_shape=[4096, n])
            cases.append(dict(base, x_strides=[4096, 1], w_strides=[n, 1], w_offset=0))
            cases.append(dict(base, x_strides=[4096, 1], w_strides=[1, 4096], w_offset=0))
            cases.append(dict(base, x_strides=[0, 1], w_strides=[n, 1], w_offset=0))
        for m in (1, 64, 4096):
            cases.append(dict(device=device, dtype=dtype, x_shape=[2, m, 4096], x_strides=[m * 4096, 4096, 1],
                              x_offset=0, w_shape=[4096, 4096], w_strides=[4096, 1], w_offset=0, bias_stride=1))
        cases.append(dict(device=device, dtype=dtype, x_shape=[4096], x_strides=[1], x_offset=0,
                          w_shape=[4096, 4096], w_strides=[1, 4096], w_offset=0, bias_stride=1))
    return cases


def _attention_case(device, dtype, q, k, v, causal=False, return_lse=False, scale=None, aligned=(True,) * 3,
                    strides=None, window=None, softcap=None):
    """An attention case; ``window`` / ``softcap`` keys only where given (the cases recorded
    before they existed keep their form)."""
    strides = strides or {}
    case = dict(device=device, dtype=dtype, q_shape=list(q), k_shape=list(k), v_shape=list(v),
                q_strides=list(strides.get("q", _contiguous(q))), k_strides=list(strides.get("k", _contiguous(k))),
                v_strides=list(strides.get("v", _contiguous(v))), causal=causal, return_lse=return_lse,
                scale=scale, aligned=list(aligned))
    if window is not None:
        case["window"] = list(window)
    if softcap is not None:
        case["softcap"] = softcap
    return case


def attention_cases():
    cases = []
    for device, dtype in itertools.product(DEVICES, DTYPES):
        for d, dv in ((32, 32), (64, 64), (80, 80), (96, 96), (128, 128), (160, 160), (192, 128), (256, 256),
                      (1, 1), (17, 33)):
            for b, h, nq, nk in ((64, 16, 512, 512), (16, 16, 2048, 2048), (4, 16, 8192, 8192),
                                 (1, 32, 4096, 4096), (2, 16, 16384, 16384), (1, 1, 100, 333)):
                for causal in (False, True):
                    cases.append(_attention_case(device, dtype, (b, h, nq, d), (b, h, nk, d), (b, h, nk, dv),
                                                 causal=causal, return_lse=causal))
            for b, h, nq, nk in ((8, 32, 1, 8192), (16, 32, 4, 8192), (1, 32, 1, 131072), (64, 32, 1, 2048),
                                 (8, 32, 2, 100), (4, 8, 16, 4096), (4, 8, 17, 4096), (2, 4, 5, 0)):
                cases.append(_attention_case(device, dtype, (b, h, nq, d), (b, h, nk, d), (b, h, nk, dv)))
                # grouped-query through a broadcast head axis
                cases.append(_attention_case(device, dtype, (b, 8, 4, nq, d), (b, 8, 1, nk, d), (b, 8, 1, nk, dv)))
        q, k, v = (2, 4, 256, 64), (2, 4, 300, 64), (2, 4, 300, 64)
        cases.append(_attention_case(device, dtype, q, k, v, scale=-0.5))
        cases.append(_attention_case(device, dtype, q, k, v, aligned=(True, False, True)))
        strided = {"k": (4 * 300 * 128, 300 * 128, 128, 1)}  # every row padded to 128
        cases.append(_attention_case(device, dtype, q, k, v, strides=strided))
        strided = {"v": (4 * 300 * 64 * 2, 300 * 64 * 2, 64 * 2, 2)}  # unit-stride broken
        cases.append(_attention_case(device, dtype, q, k, v, strides=strided))
        cases.append(_attention_case(device, dtype, (256, 64), (300, 64), (300, 64), causal=True))
        cases.append(_attention_case(device, dtype, (3, 1, 2, 4, 1, 64, 64), (1, 5, 1, 1, 1, 64, 64),
                                     (1, 5, 1, 1, 1, 64, 64)))
        # sliding windows and softcap: tiles by the keys a row sees, splits by a block's span,
        # the band and softcap arguments
        for d in (64, 128):
            for window, causal in (((256, 0), True), ((1024, 0), True), ((4096, None), True), ((256, 256), False)):
                shape = (4, 16, 8192, d)
                cases.append(_attention_case(device, dtype, shape, shape, shape, causal=causal, window=window))
            for b, h, nq, nk in ((8, 32, 1, 131072), (2, 4, 16, 65536), (1, 32, 4096, 4096)):
                q, kv = (b, h, nq, d), (b, h, nk, d)
                cases.append(_attention_case(device, dtype, q, kv, kv, causal=True, window=(4096, 0), softcap=30.0))
            q, kv = (8, 8, 4, 1, d), (8, 8, 1, 65536, d)  # grouped-query decode over a window
            cases.append(_attention_case(device, dtype, q, kv, kv, causal=True, window=(1024, 0)))
        q, k = (2, 4, 256, 64), (2, 4, 300, 64)
        cases.append(_attention_case(device, dtype, q, k, k, scale=-0.5, softcap=5.0))  # wgmma under a softcap
    return cases


def logsumexp_cases():
    cases = []
    for device, dtype in itertools.product(DEVICES, DTYPES):
        base = dict(device=device, dtype=dtype)
        for rows, length in ((1, 1), (1000, 7), (65536, 128), (4096, 4096), (16, 1 << 20), (1, 1 << 24), (3, 50000)):
            cases.append(dict(base, shape=[rows, length], strides=[length, 1], b_strides=None, axes=[1]))
            cases.append(dict(base, shape=[rows, length], strides=[length, 1], b_strides=[length, 1], axes=[1]))
            cases.append(dict(base, shape=[rows, length], strides=[length, 1], b_strides=[0, 1], axes=[1]))
            cases.append(dict(base, shape=[rows, length], strides=[1, rows], b_strides=None, axes=[1]))
        for length, inner in ((2, 4096), (100, 256), (16384, 8), (6, 3_000_001), (1000, 4097)):
            cases.append(dict(base, shape=[length, inner], strides=[inner, 1], b_strides=None, axes=[0]))
        for shape, axes in (((64, 4096, 256), [1]), ((8, 1000, 33), [0, 2]), ((5, 7), [0, 1]), ((2048, 2048), [0, 1])):
            strides = list(_contiguous(shape))
            cases.append(dict(base, shape=list(shape), strides=strides, b_strides=None, axes=axes))
            cases.append(dict(base, shape=list(shape), strides=strides, b_strides=strides, axes=axes))
    return cases


def paged_attention_cases():
    cases = []
    for device, dtype in itertools.product(DEVICES, DTYPES):
        for d in (64, 128, 256):
            for batch, hq, hkv, nq, pages, page_size, max_pages in ((8, 32, 8, 1, 4096, 16, 512), (64, 32, 32, 1, 8192, 16, 128),
                                                                    (1, 32, 8, 1, 8192, 256, 512), (16, 32, 8, 4, 4096, 16, 512),
                                                                    (4, 8, 8, 300, 1024, 64, 64), (2, 4, 1, 17, 64, 1, 64)):
                q = [batch, hq, nq, d]
                k = [pages, hkv, page_size, d]
                for layout in ("phsd", "pshd"):  # (P, Hkv, S, D) or the (P, S, Hkv, D) storage viewed
                    if layout == "phsd":
                        kv_strides = list(_contiguous(k))
                    else:
                        kv_strides = [page_size * hkv * d, d, hkv * d, 1]
                    for causal, window, softcap, lse in ((True, None, None, True), (False, None, None, False),
                                                          (True, [1024, 0], 30.0, True)):
                        cases.append(dict(device=device, dtype=dtype, q_shape=q, q_strides=list(_contiguous(q)),
                                          k_shape=k, k_strides=kv_strides, v_shape=k, v_strides=kv_strides,
                                          table_shape=[batch, max_pages], table_strides=[max_pages, 1],
                                          lens_stride=1, causal=causal, window=window, softcap=softcap,
                                          return_lse=lse, aligned=[True, True]))
            # packed (Tq, Hq, D) with cu_seqlens_q: a mixed step, decodes only, prefill chunks only
            for tq, batch, hq, hkv, pages, page_size, max_pages in ((3150, 63, 32, 8, 8192, 16, 512),
                                                                    (60, 60, 32, 8, 4096, 16, 512),
                                                                    (2000, 3, 8, 1, 1024, 256, 64)):
                q, k = [tq, hq, d], [pages, hkv, page_size, d]
                kv_strides = [page_size * hkv * d, d, hkv * d, 1]
                for causal, window, softcap, lse in ((True, None, None, True), (False, [1024, 0], 30.0, False)):
                    cases.append(dict(device=device, dtype=dtype, q_shape=q, q_strides=list(_contiguous(q)),
                                      k_shape=k, k_strides=kv_strides, v_shape=k, v_strides=kv_strides,
                                      table_shape=[batch, max_pages], table_strides=[max_pages, 1], lens_stride=1,
                                      cu_stride=1, causal=causal, window=window, softcap=softcap, return_lse=lse,
                                      aligned=[True, True]))
    return cases


def attention_varlen_cases():
    """Packed (T, H, D) layouts: the grid comes from Tq and Hq alone, whatever the batch; head dims
    of every wgmma tile, one a tensor map cannot take (D 60) and B = 0 (the SIMT kernel)."""
    cases = []
    for device, dtype in itertools.product(DEVICES, DTYPES):
        for tq, tk, hq, hkv, d, dv, batch in ((4097, 4097, 32, 8, 128, 128, 9), (1, 300, 8, 8, 64, 64, 1),
                                              (1000, 5000, 16, 2, 80, 96, 33), (3000, 3000, 4, 4, 256, 256, 17),
                                              (500, 500, 8, 8, 60, 60, 3), (10, 10, 2, 2, 64, 64, 0)):
            q, k, v = [tq, hq, d], [tk, hkv, d], [tk, hkv, dv]
            for causal, window, softcap, lse, sinks in ((True, None, None, True, 0),
                                                        (False, [128, 0], 30.0, False, hq)):
                cases.append(dict(device=device, dtype=dtype, q_shape=q, q_strides=list(_contiguous(q)), k_shape=k,
                                  k_strides=list(_contiguous(k)), v_shape=v, v_strides=list(_contiguous(v)),
                                  cu_shape=[batch + 1], causal=causal, window=window, softcap=softcap,
                                  return_lse=lse, sink_heads=sinks))
    return cases
