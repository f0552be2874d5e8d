"""cufuse.tracing (the function cufuse.trace): the kernels and allocations of one call.

The GPU tests first prove the tracer on calls whose launches and allocations are known
(a raw kernel, a bare allocation, the unfused composition), then assert the counts each
op's design promises: one kernel per call, no allocation besides ``out``.
"""
from __future__ import annotations

import numpy as np
import pytest

import cufuse
from cufuse.bench.cases import resolve_dtype, softmax_unfused
from cufuse.tracing import Node, Trace, short_kernel_name, trace

from ..conftest import GPU


def _random(cp, rng, shape, dtype):
    return cp.asarray(rng.standard_normal(shape, dtype=np.float32)).astype(resolve_dtype(dtype))


# ------------------------------------------------------------------ CPU


@pytest.mark.parametrize(
    "symbol, name",
    [
        ("_Z12softmax_rowsI6__halfLi256ELi4EEvPKT_PS1_l", "softmax_rows<...>"),
        ("_ZN4cute6kernelINS_3fooEEEvT_", "cute::kernel<...>"),
        ("_Z7add_onePfi", "add_one"),
        ("cupy_exp__float16_float16", "cupy_exp__float16_float16"),
        ("_Zbad", "_Zbad"),
    ],
)
def test_short_kernel_name(symbol, name):
    assert short_kernel_name(symbol) == name


def test_trace_summary_counts_kernels_other_nodes_and_bytes():
    kernel = Node("kernel", "k", "_Z1kv", (4, 1, 1), (256, 1, 1), 0)
    result = Trace("f", (kernel, Node("memset"), kernel), (1024, 3 << 20))
    assert result.kernel_count == 2
    assert result.allocated_bytes == 1024 + (3 << 20)
    assert result.summary() == "2 kernels + 1 other node, 2 allocations (3.0 MiB)"
    assert "kernel k  grid 4x1x1  block 256x1x1" in str(result)


def test_trace_summary_of_a_call_whose_kernels_could_not_be_captured():
    result = Trace("f", (), (64,), uncaptured="calling cuBLAS API during stream capture is currently unsupported")
    assert result.summary() == ("kernels not seen (calling cuBLAS API during stream capture is currently "
                                "unsupported), 1 allocation (64 B)")


@pytest.mark.skipif(GPU, reason="checks the message given where no GPU is present")
def test_trace_without_gpu_says_so():
    with pytest.raises(RuntimeError, match="trace: needs a CUDA GPU"):
        trace(np.negative, np.ones(3))


# ------------------------------------------------------------------ GPU: the tracer itself

ADD_ONE = r'extern "C" __global__ void add_one(float* x, int n) {' \
          r' int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) x[i] += 1.0f; }'


def test_trace_sees_one_raw_kernel_and_does_not_run_the_captured_call(cp):
    kernel = cp.RawKernel(ADD_ONE, "add_one")
    x = cp.zeros(1000, dtype=cp.float32)

    def launch(array):
        kernel((4,), (256,), (array, np.int32(array.size)))

    result = trace(launch, x)
    assert [node.kind for node in result.nodes] == ["kernel"], str(result)
    node = result.nodes[0]
    assert (node.name, node.grid, node.block) == ("add_one", (4, 1, 1), (256, 1, 1))
    assert result.allocations == ()
    assert bool((x == 1).all())  # the warm-up ran; the captured graph was never launched


def test_trace_counts_allocations_by_size(cp):
    result = trace(lambda n: cp.empty(n, dtype=cp.uint8), 4096)
    assert result.allocations == (4096,)
    assert result.kernel_count == 0


def test_trace_sees_the_intermediates_of_the_unfused_composition(cp, rng):
    x = _random(cp, rng, (512, 1000), "float32")
    result = trace(softmax_unfused, x, -1)
    # max, subtract, exp, sum, divide: at least three kernels and an array per step
    assert result.kernel_count >= 3, str(result)
    assert len(result.allocations) >= 3, str(result)
    assert result.allocated_bytes >= 3 * x.nbytes, str(result)


def test_trace_of_a_cublas_call_still_counts_its_allocations(cp, rng):
    a, b = (_random(cp, rng, (256, 256), "float32") for _ in range(2))
    result = trace(cp.matmul, a, b)
    assert a.nbytes in result.allocations, str(result)  # the product
    # CuPy refuses cuBLAS calls during a capture; where it does not, the GEMM is seen
    assert ("stream capture" in result.uncaptured) or result.kernel_count >= 1, str(result)


# ------------------------------------------------------------------ GPU: what the ops promise


def _one_kernel_nothing_else(result: Trace):
    assert [node.kind for node in result.nodes] == ["kernel"], f"expected one kernel and nothing else:\n{result}"


SOFTMAX_ON_CHIP = [  # rows that fit on chip: one launch, no scratch
    ((4097, 33), "float16", -1),  # several rows per warp
    ((300, 3000), "float32", -1),  # a warp or a block per row
    ((64, 20000), "float16", -1),  # a block per row
    ((4096, 515), "float32", 0),  # a leading axis, reduced down the columns
]


@pytest.mark.parametrize("shape, dtype, axis", SOFTMAX_ON_CHIP)
@pytest.mark.parametrize("fn", [cufuse.softmax, cufuse.log_softmax])
def test_softmax_is_one_kernel_and_allocates_only_out(cp, rng, fn, shape, dtype, axis):
    x = _random(cp, rng, shape, dtype)
    given_out = trace(fn, x, axis, out=cp.empty_like(x))
    _one_kernel_nothing_else(given_out)
    assert given_out.allocations == (), str(given_out)
    assert trace(fn, x, axis).allocations == (x.nbytes,)


def test_softmax_row_on_a_cluster_is_one_kernel(cp, rng):
    if int(cp.cuda.Device().compute_capability) < 90:
        pytest.skip("thread-block clusters need compute capability 9.0")
    x = _random(cp, rng, (8, 100000), "float32")  # 400 KB rows: beyond one SM, within a cluster
    result = trace(cufuse.softmax, x, -1, out=cp.empty_like(x))
    _one_kernel_nothing_else(result)
    assert result.allocations == ()


@pytest.mark.parametrize(
    "m, k, n, dtype",
    [(512, 256, 384, "float16"), (7, 4096, 4096, "bfloat16"), (65, 1000, 300, "float32")],
)
def test_linear_relu_is_one_kernel(cp, rng, m, k, n, dtype):
    x, weight, bias = (_random(cp, rng, shape, dtype) for shape in ((m, k), (k, n), (n,)))
    out = cp.empty((m, n), dtype=x.dtype)
    result = trace(cufuse.fused_linear_relu, x, weight, bias, out=out)
    # a split-K workspace is allowed, but it is allocated once and reused, so a call allocates nothing
    _one_kernel_nothing_else(result)
    assert result.allocations == (), str(result)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_prefill_is_one_kernel(cp, rng, causal):
    q, k, v = (_random(cp, rng, (4, 16, 1024, 64), "float16") for _ in range(3))
    result = trace(cufuse.attention, q, k, v, causal=causal, out=cp.empty_like(q))
    _one_kernel_nothing_else(result)
    assert result.allocations == (), str(result)
    with_lse = trace(cufuse.attention, q, k, v, causal=causal, return_lse=True, out=cp.empty_like(q))
    assert with_lse.allocations == (4 * 16 * 1024 * 4,), str(with_lse)


def test_attention_decode_is_at_most_two_kernels_with_a_small_workspace(cp, rng):
    q = _random(cp, rng, (4, 8, 1, 128), "bfloat16")
    k, v = (_random(cp, rng, (4, 8, 8192, 128), "bfloat16") for _ in range(2))
    result = trace(cufuse.attention, q, k, v, out=cp.empty_like(q))
    assert result.kernel_count <= 2 and len(result.nodes) == result.kernel_count, str(result)
    assert len(result.allocations) <= 2, str(result)
    # the split-KV partials are O(B*H*Nq*splits), far below the K and V they summarise
    assert result.allocated_bytes <= k.nbytes // 8, str(result)
