"""The traffic model, checked against counts done by hand on small shapes."""
from __future__ import annotations

import pytest

from cufuse import traffic


def test_softmax_reads_and_writes_once_fused_four_and_two_times_unfused():
    model = traffic.softmax((3, 4), "float16")  # 12 elements of 2 bytes: 24 B per pass
    assert model.min_bytes == 24 + 24
    assert model.unfused_bytes == 4 * 24 + 2 * 24
    assert model.flops == 5 * 12
    assert model.intensity == pytest.approx(60 / 48)
    assert model.saving == pytest.approx(3.0)


def test_softmax_counts_every_element_whatever_the_shape():
    assert traffic.softmax((2, 3, 5), "float32") == traffic.softmax((30,), "float32")
    assert traffic.softmax((7,), "bfloat16").min_bytes == 2 * 7 * 2


def test_linear_relu_with_bias():
    # x 2x3 (6), weight 3x4 (12), bias 4, out 2x4 (8) float32 elements
    model = traffic.linear_relu((2, 3), (3, 4), "float32")
    assert model.min_bytes == (6 + 12 + 4 + 8) * 4
    # GEMM writes the 2x4 product, + bias reads and writes it, ReLU reads it: 4 more passes of 32 B
    assert model.unfused_bytes == (6 + 12 + 4 + 8) * 4 + 4 * 8 * 4
    assert model.flops == 2 * 2 * 4 * 3


def test_linear_relu_without_bias_and_batched_x():
    assert traffic.linear_relu((2, 3), (3, 4), "float32", bias=False).min_bytes == (6 + 12 + 8) * 4
    model = traffic.linear_relu((5, 2, 3), (3, 4), "float16")  # M = 10
    assert model.min_bytes == (30 + 12 + 4 + 40) * 2
    assert model.flops == 2 * 10 * 4 * 3


def test_linear_relu_small_m_is_the_weight_stream():
    model = traffic.linear_relu((1, 8192), (8192, 8192), "bfloat16")
    assert model.min_bytes == (8192 + 8192 * 8192 + 8192 + 8192) * 2
    assert model.intensity == pytest.approx(1.0, rel=1e-3)  # 2 FLOP per 2-byte weight element


def test_attention_counts_scores_and_probabilities_unfused():
    # 2x3 = 6 heads, Nq 5, Nk 7, D 4, Dv 6, float16
    model = traffic.attention((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), "float16")
    q, k, v, out = 6 * 5 * 4, 6 * 7 * 4, 6 * 7 * 6, 6 * 5 * 6
    assert model.min_bytes == (q + k + v + out) * 2
    assert model.flops == 2 * 6 * 5 * 7 * (4 + 6)
    # scores written and read, probabilities written and read: 4 passes of 6x5x7 elements
    assert model.unfused_bytes == model.min_bytes + 4 * 6 * 5 * 7 * 2


def test_attention_causal_halves_the_flops_not_the_bytes():
    full = traffic.attention((1, 2, 8, 4), (1, 2, 8, 4), (1, 2, 8, 4), "float32")
    causal = traffic.attention((1, 2, 8, 4), (1, 2, 8, 4), (1, 2, 8, 4), "float32", causal=True)
    assert causal.flops * 2 == full.flops
    assert (causal.min_bytes, causal.unfused_bytes) == (full.min_bytes, full.unfused_bytes)


def test_attention_lse_adds_one_float32_per_query_row():
    plain = traffic.attention((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4), "float16")
    with_lse = traffic.attention((2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 4), "float16", return_lse=True)
    assert with_lse.min_bytes - plain.min_bytes == 6 * 5 * 4


def test_attention_broadcast_kv_is_read_once():
    # GQA/MQA by a size-1 head axis: 8 query heads share one k and one v
    model = traffic.attention((2, 4, 5, 8), (2, 1, 7, 8), (2, 1, 7, 8), "float32")
    assert model.min_bytes == (2 * 4 * 5 * 8 + 2 * 7 * 8 + 2 * 7 * 8 + 2 * 4 * 5 * 8) * 4
    assert model.flops == 2 * 8 * 5 * 7 * 16
    assert model.unfused_bytes == model.min_bytes + 4 * 8 * 5 * 7 * 4


def test_attention_prefill_flops_halve_for_causal():
    n, d = 2048, 128
    model = traffic.attention((16, 16, n, d), (16, 16, n, d), (16, 16, n, d), "bfloat16", causal=True)
    assert model.flops == 4 * 16 * 16 * n * n * d // 2


@pytest.mark.parametrize("call, error, message", [
    (lambda: traffic.softmax((3, 4), "abc"), TypeError, "traffic.softmax: argument 'dtype' expected float16"),
    (lambda: traffic.softmax((3, 4), "int64"), TypeError, "argument 'dtype' expected"),
    (lambda: traffic.softmax((3, -4), "float32"), ValueError, "argument 'shape' expected non-negative int"),
    (lambda: traffic.softmax(3, "float32"), TypeError, "argument 'shape' expected a shape"),
    (lambda: traffic.linear_relu((2, 3), (4, 5), "float16"), ValueError, r"argument 'weight_shape' expected \(3, N\)"),
    (lambda: traffic.linear_relu((2, 3), (3,), "float16"), ValueError, "weight_shape' expected at least 2"),
    (lambda: traffic.attention((1, 4, 8), (1, 5, 16), (1, 5, 8), "float16"), ValueError, "argument 'k_shape'"),
    (lambda: traffic.attention((2, 4, 8), (3, 5, 8), (3, 5, 8), "float16"), ValueError, "broadcast"),
])
def test_bad_arguments_name_the_function_and_the_argument(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_softmax_with_rows_across_arrays_reads_twice():
    """cufuse.dask with the reduced axis in several chunks: partials in one read, the output
    pass a second read and the write."""
    whole, split = traffic.softmax((8, 1000), "float32"), traffic.softmax((8, 1000), "float32", split_rows=True)
    assert split.min_bytes == 3 * 8 * 1000 * 4 == 1.5 * whole.min_bytes and split.unfused_bytes == whole.unfused_bytes
