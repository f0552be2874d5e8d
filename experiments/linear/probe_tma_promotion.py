"""Does the TMA maps' L2 promotion change the small-M weight stream? (docs/linear.md, the L2
promotion of the weight streams)

Run: ``python3 experiments/linear/probe_tma_promotion.py`` (seconds). Times the default
fused_linear_relu of M = 16 and M = 64 x 8192^2 bfloat16 (the swapped-operand TMA stream),
both weight layouts, with its tensor maps encoded at each L2 promotion (none, 64, 128, 256
bytes; the product uses ``operands.STREAM_L2_PROMOTION``, 128, for M <= 64), against cuBLASLt
(``torch._addmm_activation``) in the same run. The candidates are the default plan with its
maps' geometry changed, bound and launched directly (no module state is touched).
``python3 experiments/linear/probe_tma_promotion.py once`` instead runs each case's default and
cuBLASLt twice and stops (the target of ``ncu --metrics dram__bytes_read.sum,...``).
"""
import dataclasses
import sys

import cufuse
from cufuse._core.device import current_device_info
from cufuse._core.plans import BoundPlan, Plan, TensorMap
from cufuse.bench.cases import linear_case, to_torch
from cufuse.bench.runner import input_sets
from cufuse.bench.timing import time_cuda_budget
from cufuse.ops.linear.plan import plan_linear

PROMOTIONS = {"none": 0, "64B": 64, "128B": 128, "256B": 256}


def promoted(x, w, b, out, promotion):
    """The default plan of this call with every tensor map at ``promotion`` bytes, bound."""
    item = x.dtype.itemsize
    dev = current_device_info()
    plan = plan_linear(x.shape, tuple(s // item for s in x.strides), x.data.ptr, w.shape,
                       tuple(s // item for s in w.strides), w.data.ptr, b.strides[0] // item, out.data.ptr, x.dtype,
                       dev)

    def remap(arg):
        if isinstance(arg, TensorMap):
            return TensorMap(arg.name, dataclasses.replace(arg.geometry, l2_promotion=promotion))
        return arg

    launches = tuple(dataclasses.replace(launch, args=tuple(map(remap, launch.args))) for launch in plan.launches)
    bound = BoundPlan(Plan(launches, plan.scratch, plan.temporaries), dev)
    return lambda x, w, b, out: bound({"x": x, "weight": w, "bias": b, "out": out})


def main():
    import torch

    once = sys.argv[1:] == ["once"]
    for m in (16, 64):
        for layout in ("kn", "nk"):
            case = linear_case(m, 8192, 8192, "bfloat16", layout)
            sets = input_sets(case)
            torch_sets = [tuple(to_torch(a) for a in s[:-1]) for s in sets]

            def peer(x, w, b):
                return torch._addmm_activation(b, x, w)

            if once:
                for _ in range(2):
                    cufuse.fused_linear_relu(*sets[0][:3], out=sets[0][3])
                    peer(*torch_sets[0])
                torch.cuda.synchronize()
                continue
            row = [f"{case.label:24}", f"cuBLASLt {case.rate(time_cuda_budget(peer, torch_sets)):5.2f}"]
            for name, value in PROMOTIONS.items():
                ours = promoted(*sets[0], value)  # one plan serves every set: same signature
                row.append(f"{name} {case.rate(time_cuda_budget(ours, sets)):5.2f}")
            print("  ".join(row) + "  TB/s", flush=True)


if __name__ == "__main__":
    main()
