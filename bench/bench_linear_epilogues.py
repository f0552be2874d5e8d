"""fused_linear's activations and fused_gated_linear (issue 23) on the model projection grid
(cufuse.bench.cases.epilogue_cases): fused_linear against cuBLASLt's RELU / GELU epilogues
(torch._addmm_activation), QuACK's gemm_act (where importable) and the unfused CuPy
composition; fused_gated_linear against one cuBLASLt GEMM on [w_gate | w_up] followed by
torch's activation and multiply, QuACK's gated gemm_act, and the unfused CuPy composition; a
device copy of the same bytes where M <= 64."""
OP = "linear_epilogues"


def test_linear_epilogues(case, impl_name, run_benchmark):
    run_benchmark(case, impl_name)
