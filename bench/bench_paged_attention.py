"""paged attention (issue 18): attention_paged over shuffled pages of 1 to 256 tokens, mixed
lengths, next to FA4 on the same pages (where importable), cufuse's dense attention and SDPA (FLASH,
CUDNN) on the equal dense caches,
and a device copy of the bytes actually read. Classes and their minima: cufuse.bench.cases
(PAGED_CLASSES, paged_class)."""
OP = "paged_attention"


def test_paged_attention(case, impl_name, run_benchmark):
    run_benchmark(case, impl_name)
