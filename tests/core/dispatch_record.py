"""Plans as records and as the lines of the dispatch snapshot (``tests/data/dispatch.txt``,
checked by ``test_dispatch.py``, rewritten by ``pytest tests/core/test_dispatch.py
--update-dispatch``).

A record holds, per case of ``dispatch_cases.py``, what the op's pure planner decides: each
launch's kernel, grid, block, shared memory, scalar arguments, pointer arguments, tensor
maps, PDL shared memory and attributes, and the plan's scratch and temporaries. ``line``
writes a case and its record as one line of text: the case's fields, then " -> " and the
launches (" | " between them)."""
from __future__ import annotations

import numpy as np

from cufuse._core import launch as core_launch
from cufuse._core.device import A100, H200
from cufuse._core.dtypes import BFLOAT16
from cufuse._core.plans import Scratch, TensorMap, Temporary

from .dispatch_cases import (attention_cases, attention_varlen_cases, linear_cases, logsumexp_cases,
                             paged_attention_cases, softmax_cases, value)

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
                           g.l2_promotion] + ([g.batch, g.batch_stride] if g.batch else []) for g in maps]
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


@_guarded
def record_logsumexp(case):
    from cufuse.ops.logsumexp.plan import plan_logsumexp

    dev = DEVICES[case["device"]]
    b_strides = None if case["b_strides"] is None else tuple(case["b_strides"])
    plan = plan_logsumexp(tuple(case["shape"]), tuple(case["strides"]), b_strides, _dtype(case["dtype"]),
                          tuple(case["axes"]), True, dev)
    return plan_record(plan, dev)


@_guarded
def record_paged_attention(case):
    from cufuse.ops.paged_attention.plan import plan_attention_paged

    dev = DEVICES[case["device"]]
    window = (-1, -1) if case["window"] is None else tuple(case["window"])
    plan = plan_attention_paged(tuple(case["q_shape"]), tuple(case["q_strides"]), tuple(case["k_shape"]),
                                tuple(case["k_strides"]), tuple(case["v_shape"]), tuple(case["v_strides"]),
                                tuple(case["table_shape"]), tuple(case["table_strides"]), case["lens_stride"],
                                _dtype(case["dtype"]), case["causal"], 1.0 / float(np.sqrt(case["q_shape"][-1])),
                                window, case["softcap"] or 0.0, case["return_lse"], tuple(case["aligned"]), dev,
                                cu_stride=case.get("cu_stride", -1))
    return plan_record(plan, dev)


@_guarded
def record_attention_varlen(case):
    from cufuse.ops.attention.plan import plan_varlen
    from cufuse.ops.attention.varlen_problem import describe_varlen

    dev = DEVICES[case["device"]]
    shapes = {"q": tuple(case["q_shape"]), "k": tuple(case["k_shape"]), "v": tuple(case["v_shape"]),
              "cu_seqlens_q": tuple(case["cu_shape"]), "cu_seqlens_k": tuple(case["cu_shape"])}
    strides = {"q": tuple(case["q_strides"]), "k": tuple(case["k_strides"]), "v": tuple(case["v_strides"]),
               "cu_seqlens_q": (1,), "cu_seqlens_k": (1,)}
    window = (-1, -1) if case["window"] is None else tuple(case["window"])
    problem = describe_varlen(shapes, strides, _dtype(case["dtype"]), (True,) * 3, case["causal"],
                              1.0 / float(np.sqrt(case["q_shape"][-1])), window, case["softcap"], case["return_lse"],
                              case["sink_heads"])
    return plan_record(plan_varlen(problem, dev), dev)


OPS = {"softmax": (softmax_cases, record_softmax), "logsumexp": (logsumexp_cases, record_logsumexp),
       "linear": (linear_cases, record_linear), "attention": (attention_cases, record_attention),
       "paged_attention": (paged_attention_cases, record_paged_attention),
       "attention_varlen": (attention_varlen_cases, record_attention_varlen)}

# The scalar arguments' types as one-letter suffixes (int32 plain): exact and short.
_SUFFIX = {"int32": "", "int64": "L", "uint64": "U", "float32": "f", "float64": "d"}


def _text(v) -> str:
    """A case field or record entry as compact text: lists joined by ",", None as "-"."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, list):
        return ",".join(_text(x) for x in v) or "[]"
    return str(v)


def _scalar(typed: str) -> str:
    """``value``'s typed text as the number and its type's suffix; floats by their shortest
    round-trip repr in their own type."""
    kind, number = typed.split(":", 1)
    if kind.startswith("float"):
        number = repr(float(np.dtype(kind).type(float.fromhex(number))))
    return number + _SUFFIX[kind]


def _launch_text(launch: dict) -> str:
    fields = [launch["kernel"], f"grid={_text(launch['grid'])}", f"block={_text(launch['block'])}",
              f"smem={launch['smem']}", "args=" + ",".join(_scalar(a) for a in launch["scalars"]),
              f"ptrs={_text(launch['pointers'])}"]
    fields += [f"map={_text(m)}" for m in launch.get("maps", [])]
    fields += [f"{key}={_text(launch[key])}" for key in ("pdl_smem", "whole_carveout", "resident_blocks")
               if key in launch]
    return " ".join(fields)


def line(op: str, case: dict, record: dict) -> str:
    """One snapshot line: op, device, dtype, the case's other fields (sorted), then the plan."""
    head = [op, case["device"], case["dtype"]] + [f"{key}={_text(case[key])}" for key in sorted(case)
                                                  if key not in ("device", "dtype")]
    if "error" in record:
        plan = "error: " + record["error"].replace("\n", " ")
    elif record.get("copy"):
        plan = "copy"
    else:
        plan = " | ".join(_launch_text(launch) for launch in record["launches"])
        if "scratch" in record:
            plan += " scratch=" + _text([x for entry in record["scratch"] for x in
                                         (entry if isinstance(entry, list) else [entry])])
        if "temporaries" in record:
            plan += " temporaries=" + ";".join(f"{d}:{_text(shape)}" for d, shape in record["temporaries"])
    return " ".join(head) + " -> " + plan


def snapshot_lines(ops=None) -> list:
    """The snapshot of ``ops`` (every op by default) from today's planners, sorted."""
    return sorted(line(op, case, record(case)) for op, (cases, record) in OPS.items() if ops is None or op in ops
                  for case in cases())
