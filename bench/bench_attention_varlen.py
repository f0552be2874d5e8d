"""ragged prefill: attention_varlen over 32 to 256 sequences of 64 to 16K tokens (fixed seed),
beside cufuse's dense attention on the same total FLOPs and FA4's flash_attn_varlen_func on the
same packed arrays (where importable). Cases and classes: cufuse.bench.cases.attention_varlen."""
OP = "attention_varlen"


def test_attention_varlen(case, impl_name, run_benchmark):
    run_benchmark(case, impl_name)
