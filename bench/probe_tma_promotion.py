"""Does the TMA maps' L2 promotion change the small-M weight stream? (bench/NOTES.md, "linear v13")

Run: ``python3 bench/probe_tma_promotion.py`` (seconds). Times the default fused_linear_relu
of M = 16 (swapped-operand TMA kernel) and M = 64 (TMA kernel) x 8192^2 bfloat16, both weight
layouts, with the tensor maps encoded at each L2 promotion (none, 64, 128, 256 bytes;
``STREAM_L2_PROMOTION``; 256 until run S7-5, 128 since), against cuBLASLt (``torch._addmm_activation``) in the same run.
``python3 bench/probe_tma_promotion.py once`` instead runs each case's default and cuBLASLt
twice and stops (the target of ``ncu --metrics dram__bytes_read.sum,...``).
"""
import sys

import cufuse
from cufuse import _tma
from cufuse import linear as linear_module
from cufuse._configs import linear as linear_configs
from cufuse.bench.cases import linear_case, to_torch
from cufuse.bench.runner import input_sets
from cufuse.bench.timing import time_cuda_budget

PROMOTIONS = {"none": 0, "64B": 64, "128B": 128, "256B": 256}


def main():
    import torch

    once = sys.argv[1:] == ["once"]
    default = linear_configs.STREAM_L2_PROMOTION
    for m in (16, 64):
        for layout in ("kn", "nk"):
            case = linear_case(m, 8192, 8192, "bfloat16", layout)
            sets = input_sets(case)
            torch_sets = [tuple(to_torch(a) for a in s[:-1]) for s in sets]

            def ours(x, w, b, out):
                return cufuse.fused_linear_relu(x, w, b, out=out)

            def peer(x, w, b):
                return torch._addmm_activation(b, x, w)

            if once:
                for _ in range(2):
                    ours(*sets[0])
                    peer(*torch_sets[0])
                torch.cuda.synchronize()
                continue
            row = [f"{case.label:24}", f"cuBLASLt {case.rate(time_cuda_budget(peer, torch_sets)):5.2f}"]
            for name, value in PROMOTIONS.items():
                linear_configs.STREAM_L2_PROMOTION = value  # read when a plan builds its maps
                _tma._maps.clear()
                linear_module._plans.clear()
                row.append(f"{name} {case.rate(time_cuda_budget(ours, sets)):5.2f}")
            print("  ".join(row) + "  TB/s", flush=True)
            linear_configs.STREAM_L2_PROMOTION = default
            _tma._maps.clear()


if __name__ == "__main__":
    main()
