"""fused_linear_relu (issue 4): cufuse, unfused CuPy, torch._addmm_activation (cuBLASLt's
RELU_BIAS epilogue), torch.relu(x @ w + b), and a device copy of the same bytes for the
small-M shapes. Issue 23: fused_linear's activations (peers: cuBLASLt's RELU / GELU
epilogues, the unfused CuPy composition) and fused_gated_linear (peers: one cuBLASLt GEMM on
[w_gate | w_up] then torch's activation and multiply, the unfused CuPy composition) on the
model projection grid (cufuse.bench.cases.model_cases)."""
OP = "linear"


def test_linear_relu(case, impl_name, run_benchmark):
    run_benchmark(case, impl_name)
