"""softmax (issues 3 and 24): cufuse, unfused CuPy, cupyx.scipy.special.softmax, torch.softmax,
QuACK's softmax (where importable) and a device copy of the same bytes (the ceiling), on issue 3's grid and issue 24's classes
(cufuse.bench.cases.SOFTMAX_CLASSES; views add a CuPy copy of the same view)."""
OP = "softmax"


def test_softmax(case, impl_name, run_benchmark):
    run_benchmark(case, impl_name)
