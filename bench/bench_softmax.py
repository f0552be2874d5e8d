"""softmax (issue 3): cufuse, unfused CuPy, cupyx.scipy.special.softmax, torch.softmax
and a device copy of the same bytes (the ceiling)."""
OP = "softmax"


def test_softmax(case, impl_name, run_benchmark):
    run_benchmark(case, impl_name)
