"""Plans as JSON records: the dispatch snapshot's format (``tests/data/dispatch.json.gz``,
checked by ``test_dispatch.py``; written by ``scripts/record_dispatch.py``).

A record holds, per case of ``dispatch_cases.py``, what the op's pure planner decides: each
launch's kernel, grid, block, shared memory, scalar arguments, pointer arguments, tensor
maps, PDL shared memory and attributes, and the plan's scratch and temporaries."""
from __future__ import annotations

import numpy as np

from cufuse._core import launch as core_launch
from cufuse._core.device import A100, H200
from cufuse._core.dtypes import BFLOAT16
from cufuse._core.plans import Scratch, TensorMap, Temporary

from .dispatch_cases import attention_cases, linear_cases, softmax_cases, value

DEVICES = {"H200": H200, "A100": A100}


def _dtype(name):
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


def launch_record(launch, dev):
    record = {
        "kernel": launch.spec.expression,
        "grid": list(launch.grid),
        "block": list(launch.block),
        "smem": launch.smem,
        "scalars": [value(a) for a in launch.args if isinstance(a, np.generic)],
        "pointers": [a if isinstance(a, str) else f"scratch{a.index}" if isinstance(a, Scratch)
                     else f"temp{a.index}" if isinstance(a, Temporary) else f"map:{a.name}"
                     for a in launch.args if not isinstance(a, np.generic)],
    }
    maps = [a.geometry for a in launch.args if isinstance(a, TensorMap)]
    if maps:
        record["maps"] = [[str(g.dtype), g.inner, g.outer, g.stride, g.box_inner, g.box_outer, g.swizzle,
                           g.l2_promotion] for g in maps]
    if launch.pdl:
        record["pdl_smem"] = core_launch.pdl_smem(launch.smem, 0, int(np.prod(launch.grid)), dev)
    for flag in ("whole_carveout", "resident_blocks"):
        if getattr(launch, flag):
            record[flag] = getattr(launch, flag)
    return record


def plan_record(plan, dev):
    if plan is None:
        return {"copy": True}
    record = {"launches": [launch_record(launch, dev) for launch in plan.launches]}
    if plan.scratch is not None:
        record["scratch"] = [plan.scratch.purpose] + [[str(np.dtype(d)), int(n), bool(z)]
                                                      for d, n, z in plan.scratch.buffers]
    if plan.temporaries:
        record["temporaries"] = [[str(np.dtype(d)), list(shape)] for d, shape in plan.temporaries]
    return record


def _guarded(fn):
    def run(case):
        try:
            return fn(case)
        except Exception as exc:  # noqa: BLE001
            return {"error": f"{type(exc).__name__}: {exc}"}

    return run


@_guarded
def record_softmax(case):
    from cufuse.ops.softmax.plan import plan_softmax

    dev = DEVICES[case["device"]]
    plan = plan_softmax(tuple(case["shape"]), tuple(case["strides"]), _dtype(case["dtype"]), tuple(case["axes"]),
                        case["log"], dev)
    return plan_record(plan, dev)


@_guarded
def record_linear(case):
    from cufuse.ops.linear.plan import plan_linear

    dev = DEVICES[case["device"]]
    dtype = _dtype(case["dtype"])
    base = 0x10000000
    plan = plan_linear(tuple(case["x_shape"]), tuple(case["x_strides"]), base + case["x_offset"] * dtype.itemsize,
                       tuple(case["w_shape"]), tuple(case["w_strides"]), base + case["w_offset"] * dtype.itemsize,
                       case["bias_stride"], None, dtype, dev)
    return plan_record(plan, dev)


@_guarded
def record_attention(case):
    from cufuse.ops.attention.plan import plan_attention

    dev = DEVICES[case["device"]]
    scale = case["scale"] if case["scale"] is not None else 1.0 / float(np.sqrt(case["q_shape"][-1]))
    plan = plan_attention(tuple(case["q_shape"]), tuple(case["q_strides"]), tuple(case["k_shape"]),
                          tuple(case["k_strides"]), tuple(case["v_shape"]), tuple(case["v_strides"]),
                          _dtype(case["dtype"]), case["causal"], scale, case["return_lse"], tuple(case["aligned"]), dev,
                          window=None if "window" not in case else tuple(case["window"]),
                          softcap=case.get("softcap"))
    return plan_record(plan, dev)


OPS = {"softmax": (softmax_cases, record_softmax), "linear": (linear_cases, record_linear),
       "attention": (attention_cases, record_attention)}
