"""fused_linear_relu (issue 4): cufuse, unfused CuPy, torch._addmm_activation (cuBLASLt's
RELU_BIAS epilogue), torch.relu(x @ w + b), QuACK's gemm_act (where importable), and a device
copy of the same bytes for the small-M shapes."""
OP = "linear"


def test_linear_relu(case, impl_name, run_benchmark):
    run_benchmark(case, impl_name)
