"""attention (issue 5): cufuse, SDPA with the FLASH and CUDNN backends, FlashAttention-4
(FA4, where importable), unfused CuPy where the scores fit, and a device copy of the same bytes for decode."""
OP = "attention"


def test_attention(case, impl_name, run_benchmark):
    run_benchmark(case, impl_name)
