"""How fused_linear_relu launches on the GPU: one kernel and no allocation but ``out`` per
call (the split-K workspace is reused), the repeated-signature fast path, and programmatic
dependent launch (back-to-back calls wait for the previous output)."""
from __future__ import annotations

import dataclasses
import math
import re

import numpy as np
import pytest

from cufuse._core.device import device_info
from cufuse._core.plans import BoundPlan, Plan
from cufuse.ops.linear import fused_linear_relu
from cufuse.ops.linear.dmma import DMMA_M16_TILE, PipelinedDmmaConfig
from cufuse.ops.linear.mma import MEDIUM_TILE, STREAM_TILE
from cufuse.ops.linear.pingpong import PINGPONG_128x128, PingPongConfig
from cufuse.ops.linear.wgmma import TMA_64x64, TMA_TILE, WGMMA_64x256, WGMMA_64x64, TmaConfig, WgmmaConfig
from cufuse.ops.linear.wide import DMMA_TILE, TF32_M64_TILE, TF32_TILE, DmmaConfig, Tf32x3Config

from ..conftest import allocations, poisoned
from .cases import BF16, F16, F32, F64, Case, compare, current_plan, make_inputs, mma, oracle, random, \
    require_kernel, require_sm90, swap, to_float64

# One case per kernel and split-K case.
LAUNCH_CASES = [
    Case((1,), 4096, 4096, BF16, "nk_t"),
    Case((16,), 4096, 4096, BF16, "kn"),
    Case((16,), 4096, 4096, BF16, "kn", config=mma(STREAM_TILE, 2)),
    Case((1,), 4096, 4096, F16, "kn", config=mma(STREAM_TILE, 2)),  # one row, split-K
    Case((300,), 520, 264, BF16, "kn", config=mma(MEDIUM_TILE)),
    Case((65,), 256, 264, F32, "kn"),
    Case((1,), 4096, 4096, F32, "kn"),  # the float32 weight stream, split through slots
    Case((7,), 33, 17, F16, "kn"),  # SIMT
    Case((64,), 4096, 520, BF16, "kn", config=WgmmaConfig(tile=WGMMA_64x256, splits=4)),  # wgmma, split-K through slots
    Case((64,), 4096, 520, BF16, "nk_t", config=TmaConfig(tile=TMA_64x64, splits=2)),  # TMA maps, split-K through slots
    Case((300,), 520, 264, F16, "kn", config=TmaConfig(tile=TMA_TILE)),
    Case((2048,), 1024, 2056, BF16, "kn", config=PingPongConfig(tile=PINGPONG_128x128)),  # persistent, 2-3 a block
    Case((16,), 4096, 520, BF16, "nk_t", config=swap(16, 2)),  # swapped TMA kernel, split-K through slots
    Case((130,), 256, 264, F32, "nk_t", config=Tf32x3Config(tile=TF32_TILE)),
    Case((130,), 256, 264, F64, "kn", config=DmmaConfig(tile=DMMA_TILE)),
    Case((40,), 2048, 264, F32, "kn", config=Tf32x3Config(tile=TF32_M64_TILE, splits=4)),  # 3xTF32, split-K through slots
    Case((16,), 2048, 264, F64, "nk_t", config=PipelinedDmmaConfig(tile=DMMA_M16_TILE, splits=4)),  # float64 slots
]


def _captured_nodes(cp, fn):
    """The node names of a CUDA graph captured around ``fn()``, and its (verbose) DOT text."""
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()  # warm: compile, split-K workspace
        stream.begin_capture()
        fn()
        graph = stream.end_capture()
    dot = graph.debug_dot_str(1)  # cudaGraphDebugDotFlagsVerbose
    return set(re.findall(r'^\s*"([^"]+)"\s*\[', dot, flags=re.MULTILINE)), dot  # node statements


@pytest.mark.parametrize("case", LAUNCH_CASES, ids=str)
def test_one_kernel_launch_per_call(cp, rng, case):
    require_kernel(cp, case)
    x, w, b = make_inputs(cp, rng, case)
    out = cp.empty(case.lead + (case.n,), dtype=case.dtype)
    nodes, dot = _captured_nodes(cp, lambda: fused_linear_relu(x, w, b, out=out, config=case.config))
    assert len(nodes) == 1 and "linear_relu" in dot, dot


@pytest.mark.parametrize("case", LAUNCH_CASES, ids=str)
def test_no_allocation_besides_out(cp, rng, case):
    require_kernel(cp, case)
    x, w, b = make_inputs(cp, rng, case)
    out = cp.empty(case.lead + (case.n,), dtype=case.dtype)

    def call(**kw):
        return fused_linear_relu(x, w, b, config=case.config, **kw)

    call(out=out)  # warm: compile, split-K workspace (documented, reused)
    assert allocations(cp, lambda: call(out=out))[1] == []
    fresh, sizes = allocations(cp, call)
    assert len(sizes) == 1 and sizes[0] >= fresh.nbytes


def test_repeated_signature_fast_path(cp, rng):
    """The second call of a signature skips validation and planning: fresh data still gives
    fresh results, and an out overlapping an input (same signature: shape, strides, alignment)
    is still refused."""
    case = Case((16,), 1024, 520, BF16, "kn")
    out = poisoned(cp, (16, 520), BF16)
    for _ in range(2):
        x, w, b = make_inputs(cp, rng, case)
        assert fused_linear_relu(x, w, b, out=out) is out
        assert compare(cp, case, x, w, b, out) is None
    flat = random(cp, rng, (16 * 1024 + 16 * 520,), BF16)
    x = flat[: 16 * 1024].reshape(16, 1024)
    overlapping = flat[16 * 1024 - 520 : 16 * 1024 - 520 + 16 * 520].reshape(16, 520)  # x's last row
    with pytest.raises(ValueError, match="must not overlap input 'x'"):
        fused_linear_relu(x, w, b, out=overlapping)


def test_prepared_calls_keep_bias_forms_activations_and_out_alignment_apart(cp, rng):
    """Each repeated signature (bias absent, a (1, N) row, a 0-d value; fused_linear's
    activations; the gated form) runs its own prepared plan on fresh data, and an out whose
    address is 2 bytes off a 4-byte boundary after calls with an aligned out (same shape and
    strides: only the address modulo 16 differs) stores element by element, not in pairs."""
    from cufuse.ops.linear import fused_gated_linear, fused_linear

    from .cases import gated_oracle, within

    case = Case((16,), 256, 264, BF16, "kn")
    for _ in range(2):
        x, w, b = make_inputs(cp, rng, case)
        for bias in (None, b.reshape(1, -1), b[3]):
            for activation in (None, "gelu", "silu"):
                out = fused_linear(x, w, bias, activation=activation)
                ref, tol = oracle(cp, x, w, bias, activation)
                assert within(cp, f"bias {getattr(bias, 'shape', None)} {activation}", out, ref, tol) is None
        w_up = random(cp, rng, w.shape, BF16)
        ref, tol = gated_oracle(cp, x, w, w_up, "silu")
        assert within(cp, "gated", fused_gated_linear(x, w, w_up), ref, tol) is None
    x, w, b = make_inputs(cp, rng, case)
    for offset in (0, 0, 1, 1):  # elements: 0 keeps the pairs' 4-byte alignment, 1 breaks it
        out = poisoned(cp, (16 * 264 + 8,), BF16)[offset : offset + 16 * 264].reshape(16, 264)
        assert fused_linear_relu(x, w, b, out=out) is out
        assert compare(cp, case, x, w, b, out) is None


CHAIN_CONFIGS = [
    None,  # the default for M = 16
    mma(STREAM_TILE, 2),
    mma(STREAM_TILE, 4),
    TmaConfig(tile=TMA_64x64, splits=2),
    WgmmaConfig(tile=WGMMA_64x64, splits=2),
    swap(16, 2),
    swap(16),
    swap(64),
]


@pytest.mark.parametrize("kmajor", [True, False], ids=["nk_t", "kn"])
@pytest.mark.parametrize("config", CHAIN_CONFIGS, ids=lambda c: "default" if c is None else f"{c.kind}-s{c.splits}")
def test_back_to_back_calls_wait_for_the_previous_output(cp, rng, config, kmajor):
    """On compute capability 9.0 the weight streams launch with programmatic dependent launch:
    a kernel's blocks may start while the previous kernel of the stream still runs, and must
    not touch memory before griddepcontrol.wait. A chain of calls in which each call's x is
    the previous call's (poisoned) out fails wherever a kernel reads or writes too early."""
    require_kernel(cp, Case((16,), 0, 0, BF16, config=config))
    m, k, steps = 16, 4096, 10

    def scaled(shape, scale):  # He-scaled weights keep the values O(1) along the ReLU chain
        return cp.asarray((rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)).astype(BF16))

    weights = [scaled((k, k), math.sqrt(2 / k)) for _ in range(2)]
    weights = [w.T if kmajor else w for w in weights]  # .T: a (N, K) array viewed as (K, N), K-major
    bias = scaled((k,), 0.1)
    chain = [random(cp, rng, (m, k), BF16)] + [poisoned(cp, (m, k), BF16) for _ in range(steps)]
    cp.cuda.get_current_stream().synchronize()
    for i in range(steps):  # back to back: no synchronisation between the calls
        fused_linear_relu(chain[i], weights[i % 2], bias, out=chain[i + 1], config=config)
    cp.cuda.get_current_stream().synchronize()
    for i in range(steps):
        ref, tol = oracle(cp, chain[i], weights[i % 2], bias)
        bad = int((~(cp.abs(to_float64(cp, chain[i + 1]) - ref) <= tol)).sum())
        assert bad == 0, f"step {i}: {bad} of {ref.size} elements off the oracle of the previous step's output"


def test_hopper_launches_weight_streams_with_programmatic_dependent_launch(cp, rng):
    require_sm90(cp)
    dev = device_info(cp.cuda.Device().id)
    case = Case((16,), 256, 264, BF16, "kn")
    x, w, b = make_inputs(cp, rng, case)
    plan = current_plan(x, w, b)
    assert plan.launches[0].pdl
    smem_per_sm = cp.cuda.Device().attributes["MaxSharedMemoryPerMultiprocessor"]
    for pdl in (True, False):  # the same plan launched with and without the attribute
        bound = BoundPlan(Plan(tuple(dataclasses.replace(launch, pdl=pdl) for launch in plan.launches),
                               plan.scratch), dev)
        launch = bound.launches[0]
        assert launch.pdl == pdl
        if pdl:  # a one-wave grid: one block an SM
            assert 2 * (launch.smem + launch.kernel.shared_size_bytes + 1024) > smem_per_sm
        out = poisoned(cp, (16, 264), BF16)
        bound({"x": x, "weight": w, "bias": b, "out": out})
        assert compare(cp, case, x, w, b, out) is None
    x65 = random(cp, rng, (65, 256), BF16)
    assert not current_plan(x65, w, b).launches[0].pdl  # past the weight streams: a plain launch
