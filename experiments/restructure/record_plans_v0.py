"""Record every launch decision of the pre-restructure code (commit 569c93b) on a broad grid.

Runs on the CPU (no GPU): the ops' plan builders are called with fake arrays, a fake
``get_kernel`` and the reference devices (H200, A100). Writes one JSON list of
``{"op", "case", "launches"}``; ``tests/data/dispatch.json`` is this file's output, and
``tests/test_dispatch.py`` checks the restructured code against it.

Usage (at commit 569c93b): ``python experiments/restructure/record_plans_v0.py OUT.json``
"""
from __future__ import annotations

import contextlib
import json
import sys

import numpy as np

sys.path.insert(0, ".")
import cufuse  # noqa: E402
from cufuse import _configs  # noqa: E402
from cufuse._configs import A100, H200  # noqa: E402

sys.path.insert(0, "tests/core")
from dispatch_cases import attention_cases, linear_cases, softmax_cases, value  # noqa: E402  (tests/core)

DEVICES = {"H200": H200, "A100": A100}


class FakeKernel:
    num_regs = 32
    shared_size_bytes = 0
    max_dynamic_shared_size_bytes = 0
    preferred_shared_memory_carveout = 0

    def __init__(self, name, args):
        self.spec = (name, tuple(args))
        self.name = name


def fake_get_kernel(source, name, *args, dynamic_smem=0):
    return FakeKernel(name, args)


def kernel_text(kernel):
    name, args = kernel.spec
    return f"{name}<{', '.join(_fmt(a) for a in args)}>" if args else name


def old_launch(plan):
    """The launch fields an old softmax or linear ``_Plan`` holds."""
    return {"kernel": kernel_text(plan.kernel), "grid": list(plan.grid), "block": list(plan.block),
            "smem": plan.smem, "scalars": [value(s) for s in plan.scalars]}


def _fmt(a):
    return ("true" if a else "false") if isinstance(a, bool) else str(a)


# ----------------------------------------------------------------------------- softmax
def record_softmax(case):
    S = sys.modules["cufuse.softmax"]

    dev = DEVICES[case["device"]]
    S.device_info = lambda device_id: dev
    S.get_kernel = fake_get_kernel
    S._allow_non_portable_cluster = lambda kernel: None
    S._plans.clear()
    dtype = np.dtype(case["dtype"]) if case["dtype"] != "bfloat16" else cufuse._dtypes.BFLOAT16
    strides = tuple(s * dtype.itemsize for s in case["strides"])
    try:
        plan = S._plan(tuple(case["shape"]), strides, dtype, tuple(case["axes"]), 0, None, case["log"])
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}
    if plan is None:
        return {"copy": True}
    launch = old_launch(plan)
    if plan.scratch is not None:
        launch["scratch"] = [str(plan.scratch[0])] + [int(v) for v in plan.scratch[1:]]
    return {"launches": [launch]}


# ----------------------------------------------------------------------------- linear
class FakeData:
    def __init__(self, ptr):
        self.ptr = ptr
        self.device_id = 0


class FakeArray:
    def __init__(self, shape, strides, dtype, offset):
        self.shape = tuple(shape)
        self.dtype = dtype
        self.itemsize = dtype.itemsize
        self.strides = tuple(s * dtype.itemsize for s in strides)
        self.data = FakeData(0x10000000 + offset)
        self.device = contextlib.nullcontext()
        self.ndim = len(shape)
        self.size = int(np.prod(shape))


def record_linear(case):
    import cufuse._configs.linear as LC
    L = sys.modules["cufuse.linear"]

    dev = DEVICES[case["device"]]
    L.current_device_info = lambda: dev
    L.get_kernel = fake_get_kernel
    L.allow_dynamic_smem = lambda kernel, smem: None
    LC.choose_config.cache_clear()
    dtype = np.dtype(case["dtype"]) if case["dtype"] != "bfloat16" else cufuse._dtypes.BFLOAT16
    x = FakeArray(case["x_shape"], case["x_strides"], dtype, case["x_offset"] * dtype.itemsize)
    w = FakeArray(case["w_shape"], case["w_strides"], dtype, case["w_offset"] * dtype.itemsize)
    b = None
    if case["bias_stride"] is not None:
        b = FakeArray((case["w_shape"][1],), (case["bias_stride"],), dtype, 0)
    out_shape = tuple(case["x_shape"][:-1]) + (case["w_shape"][1],)
    try:
        plan = L._make_plan(x, w, b, None, out_shape, None)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}
    if plan.empty:
        return {"launches": []}
    m = L._rows_view(x)[0]
    launch = old_launch(plan)
    if plan.workspace is not None:
        launch["workspace"] = [int(plan.workspace[0]), int(plan.workspace[1]), plan.workspace[2]]
    if plan.maps is not None:
        launch["maps"] = [[str(g.dtype), g.inner, g.outer, g.stride, g.box_inner, g.box_outer, g.swizzle,
                           g.l2_promotion] for g in plan.maps]
    if LC.uses_pdl(m, dev):
        launch["pdl_smem"] = LC.pdl_smem(plan.smem, 0, int(np.prod(plan.grid)), dev)
    return {"launches": [launch]}


# ----------------------------------------------------------------------------- attention
def record_attention(case):
    import cufuse._configs as C
    import cufuse._configs.attention as AC
    A = sys.modules["cufuse.attention"]

    dev = DEVICES[case["device"]]
    C.device_info = lambda device_id: dev
    A._launch_plan.cache_clear()
    AC.select_config.cache_clear()
    dtype = np.dtype(case["dtype"]) if case["dtype"] != "bfloat16" else cufuse._dtypes.BFLOAT16
    shapes = {n: tuple(case[n + "_shape"]) for n in "qkv"}
    strides = {n: tuple(s * dtype.itemsize for s in case[n + "_strides"]) for n in "qkv"}
    batch = np.broadcast_shapes(shapes["q"][:-2], shapes["k"][:-2], shapes["v"][:-2])
    scale = case["scale"] if case["scale"] is not None else 1.0 / float(np.sqrt(shapes["q"][-1]))
    try:
        plan = A._launch_plan(shapes["q"], strides["q"], shapes["k"], strides["k"], shapes["v"], strides["v"],
                              dtype, batch, case["causal"], scale, case["return_lse"], tuple(case["aligned"]),
                              case["device"], None)
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}"}
    name, *args = plan.kernel_args[1:]
    launches = [{
        "kernel": kernel_text(FakeKernel(name, args)),
        "grid": list(plan.grid),
        "block": list(plan.block),
        "smem": plan.smem,
        "scalars": [value(s) for s in plan.scalars],
        "partials": plan.takes_partials,
    }]
    if plan.splits > 1:
        launches[0]["workspace"] = [list(s) for s in plan.workspace]
        mname, *margs = plan.merge_kernel_args[1:]
        launches.append({
            "kernel": kernel_text(FakeKernel(mname, margs)),
            "grid": list(plan.merge_grid),
            "block": [AC.MERGE_THREADS],
            "smem": 0,
            "scalars": [value(s) for s in plan.merge_scalars],
        })
    return {"launches": launches}


def main(path):
    records = []
    for op, cases, record in (("softmax", softmax_cases(), record_softmax), ("linear", linear_cases(), record_linear),
                              ("attention", attention_cases(), record_attention)):
        for case in cases:
            records.append({"op": op, "case": case, **record(case)})
    reached = sorted({launch["kernel"] for r in records for launch in r.get("launches", [])})
    with open(path, "w") as handle:
        json.dump({"commit": "569c93b", "records": records, "reached": reached}, handle, indent=0)
    print(f"{len(records)} cases, {len(reached)} kernels reached")


if __name__ == "__main__":
    main(sys.argv[1])
