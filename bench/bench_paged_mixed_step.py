"""A serving step mixing prefill chunks and decodes over a shuffled paged cache
(cufuse.bench.cases.mixed_step_cases): attention_paged with cu_seqlens_q, one launch (plus the
merge), against the same work as two calls (a paged prefill of the chunks, then a paged
decode), and a device copy of the bytes read (K and V of each sequence once per KV head)."""
OP = "paged_mixed_step"


def test_paged_mixed_step(case, impl_name, run_benchmark):
    run_benchmark(case, impl_name)
