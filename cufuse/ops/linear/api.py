"""fused_linear: ``activation(x @ weight + bias)`` in one GEMM with the bias and the
activation in its epilogue (``fused_linear_relu``: the ReLU one); fused_gated_linear:
``activation(x @ w_gate) * (x @ w_up)`` in one GEMM over both weights.

Chain: validate -> choose config -> get kernel -> launch. NumPy inputs run the float64 BLAS
products of ``numpy_path`` (the tiled oracles ``cufuse.reference`` check them); CuPy inputs run the kernels of ``kernels/linear/`` (which one runs
which shape and layout: ``select`` and docs/linear.md).

Host path. A call's validation and launch depend only on its arrays' shapes, strides,
dtypes, devices and pointer alignments (and ``activation``, ``config``), never on the
pointers' values: the first call of a CuPy signature validates in full and is kept as its
prepared call (``cufuse._core.driver``); a later call of the same signature is one dict lookup,
then the launch (a given ``out`` that meets an input's bytes takes the full path and its error).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..._core.device import device_info
from ..._core.driver import Op, run
from ..._core.numpy_path import deliver
from ..._core.plans import BoundPlan, gpu_signature
from ..._core.validate import as_arrays, check_config, check_out, require_float, require_ndim, require_same_dtype
from .operands import FN, activation_code, check_bias_shape
from . import numpy_path
from .plan import plan_gated, plan_linear
from .select import GATED_VARIANTS, VARIANTS

GATED_FN = "fused_gated_linear"


def fused_linear(x, weight, bias=None, *, activation=None, out=None, config=None):
    """``activation(x @ weight + bias)`` in one GEMM, the bias and the activation in its epilogue.

    Parameters
    ----------
    x : array_like
        ``(..., K)`` or ``(K,)``. NumPy arrays and array-likes run the NumPy path and return NumPy; GPU arrays
        (CuPy, PyTorch, JAX, ...) run the GPU kernels and return CuPy.
    weight : array_like
        ``(K, N)`` with any strides: a transposed ``(N, K)`` array (PyTorch's Linear layout) works without a
        copy.
    bias : array_like or number, optional
        What broadcasts the same to every row: ``(N,)``, ``(1, N)``, or one value (``()``, ``(1,)``, a Python
        number, taken in x's dtype). None (the default): no bias.
    activation : {None, "relu", "gelu", "gelu_tanh", "silu"}, optional
        None (the default) is the plain ``x @ weight + bias``; "gelu" is exact (erf). The formulas:
        ``cufuse.reference.apply_activation`` (NaN stays NaN, -inf gives 0).
    out : array, optional
        Written in place and returned: ``(..., N)``, x's dtype, C-contiguous, on x's side, not overlapping an
        input.
    config : kernel variant, optional
        Overrides the chosen kernel configuration (GPU only: one of the variant classes of
        ``cufuse.ops.linear``, e.g. ``MmaConfig``; checked and ignored on NumPy inputs).

    Returns
    -------
    ndarray
        ``(..., N)`` (``(N,)`` for a 1-D x) in x's dtype; ``out`` when it is given.

    Raises
    ------
    TypeError
        A non-float x or arrays of different dtypes (float16, bfloat16, float32 and float64 only, one for
        all); a ``config`` that is not a linear variant; an ``out`` of another dtype or array type, or
        read-only; host and GPU inputs mixed.
    ValueError
        An unknown ``activation``; a weight that is not 2-D or whose K differs from x's last axis; a bias that
        differs from row to row (it is not a bias of the GEMM's epilogue); an ``out`` of another shape, layout
        or device, or overlapping an input; on the GPU, an x whose leading axes do not collapse into one row
        stride, or a ``config`` whose kernel cannot run these operands.

    Notes
    -----
    All arrays share one float dtype; accumulation is float32 (float64 for float64). The NumPy path computes
    in float64 and rounds once.

    On CuPy arrays nothing is copied. x's leading axes must collapse into one row stride (a C-ordered stack of
    rows, its last axis sliced or strided included); any other x layout raises ValueError rather than being
    copied silently. Operands whose rows are 16-byte aligned (unit stride along K for x, K a multiple of 16
    bytes, the weight contiguous along K or along N) run on tensor cores: float16 / bfloat16 on mma.sync, or
    on compute capability 9.0 on the warpgroup-MMA kernels (fed by TMA where tensor maps describe the
    operands; M <= 64 with the operands swapped, launched with programmatic dependent launch); float32 as
    3xTF32 (three TF32 products a term: float32-level accuracy; an infinite input gives NaN where NumPy may
    give +-inf); float64 on DMMA. float32 with M <= 4 and float64 with M = 1 stream the weight through a
    kernel of true float32 / float64 FMAs instead. Everything else runs on a SIMT kernel with arbitrary
    strides (true float32 / float64 arithmetic). Where fewer output tiles than the GPU has block slots would
    leave SMs idle, K is split over blocks that meet in a float32 workspace (one slot of partial sums a
    split, summed in split order: the same call gives the same bits) plus one int per output tile, allocated
    once per device and stream and reused. Which kernel runs which shape: docs/linear.md.

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> x = np.array([[1.0, -2.0], [0.5, 0.5]])
    >>> w = np.array([[1.0, 0.0, 2.0], [1.0, 1.0, -1.0]])
    >>> cufuse.fused_linear(x, w, np.array([0.0, 1.0, 0.0]))
    array([[-1. , -1. ,  4. ],
           [ 1. ,  1.5,  0.5]])
    >>> cufuse.fused_linear(x, w, 1.0, activation="relu")
    array([[0. , 0. , 5. ],
           [2. , 1.5, 1.5]])
    >>> np.round(cufuse.fused_linear(x, w, activation="silu"), 4)
    array([[-0.2689, -0.2384,  3.9281],
           [ 0.7311,  0.3112,  0.3112]])
    >>> cufuse.fused_linear([[-1.0]], [[1.0]])
    array([[-1.]])
    """
    return _linear(FN, x, weight, bias, activation, out, config)


def fused_linear_relu(x, weight, bias=None, *, out=None, config=None):
    """``np.maximum(x @ weight + bias, 0)`` in one GEMM.

    ``fused_linear(x, weight, bias, activation="relu", out=out, config=config)``, its errors naming
    fused_linear_relu.

    Parameters
    ----------
    x : array_like
        ``(..., K)`` or ``(K,)``; NumPy arrays and array-likes run the NumPy path, GPU arrays the kernels.
    weight : array_like
        ``(K, N)`` with any strides (a transposed ``(N, K)`` array works without a copy).
    bias : array_like or number, optional
        ``(N,)``, ``(1, N)`` or one value, as ``fused_linear`` takes it; None (the default): no bias.
    out : array, optional
        Written in place and returned: ``(..., N)`` in x's dtype, as ``fused_linear``'s.
    config : kernel variant, optional
        A variant of ``cufuse.ops.linear`` (GPU only; checked and ignored on NumPy inputs).

    Returns
    -------
    ndarray
        ``np.maximum(x @ weight + bias, 0)``, ``(..., N)`` in x's dtype; ``out`` when it is given.

    Raises
    ------
    TypeError
        A non-float x, arrays of different dtypes, a foreign ``config`` or an unusable ``out``, as
        ``fused_linear``.
    ValueError
        Shapes that do not match, a bias that differs from row to row, an x layout the GPU kernels cannot read
        without a copy or a ``config`` that cannot run the call, as ``fused_linear``.

    Notes
    -----
    The same kernels and accuracy as ``fused_linear`` (float32 as 3xTF32 on tensor cores: float32-level
    accuracy), with the ReLU in the epilogue.

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> x = np.array([[1.0, -2.0], [0.5, 0.5]])
    >>> w = np.array([[1.0, 0.0], [1.0, 1.0]])
    >>> cufuse.fused_linear_relu(x, w, np.array([0.0, 1.0]))
    array([[0. , 0. ],
           [1. , 1.5]])
    """
    return _linear("fused_linear_relu", x, weight, bias, "relu", out, config)


def fused_gated_linear(x, w_gate, w_up, *, activation="silu", out=None, config=None):
    """``activation(x @ w_gate) * (x @ w_up)`` in one kernel: the gated MLP's first half.

    SwiGLU with "silu", GeGLU with "gelu" or "gelu_tanh". x is read once for both products; neither product is
    written.

    Parameters
    ----------
    x : array_like
        ``(..., K)`` or ``(K,)``. NumPy arrays and array-likes run the NumPy path and return NumPy; GPU arrays
        (CuPy, PyTorch, JAX, ...) run the GPU kernels and return CuPy.
    w_gate, w_up : array_like
        ``(K, N)`` each, with any strides, x's dtype.
    activation : {"silu", "relu", "gelu", "gelu_tanh"}, optional
        The gate's activation (the activations of ``fused_linear``); "silu" by default.
    out : array, optional
        Written in place and returned: ``(..., N)``, x's dtype, C-contiguous, on x's side.
    config : kernel variant, optional
        A variant of ``cufuse.ops.linear.select.GATED_VARIANTS`` (GPU only; checked and ignored on NumPy
        inputs).

    Returns
    -------
    ndarray
        ``(..., N)`` in x's dtype; ``out`` when it is given.

    Raises
    ------
    TypeError
        A non-float x or arrays of different dtypes; a ``config`` that is not a gated variant; an ``out`` of
        another dtype or array type, or read-only; host and GPU inputs mixed.
    ValueError
        An unknown ``activation``; weights that are not 2-D, whose K differs from x's last axis, or of
        different shapes; an ``out`` of another shape, layout or device, or overlapping an input; on the GPU,
        a ``config`` whose kernel cannot run these operands.

    Notes
    -----
    Accumulation is float32 (float64 for float64); the NumPy path computes in float64 and rounds once.
    float16 / bfloat16 weights of one layout with 16-byte aligned rows (``fused_linear``'s tensor-core rule)
    run on tensor cores, both products' accumulators in one block sharing each tile of x: on compute
    capability 9.0, where tensor maps describe x and both weights, the TMA-fed warpgroup-MMA kernels (M <= 64
    the swapped weight stream, beyond the GEMM tiles); elsewhere mma.sync; split-K through slots summed in
    split order. Everything else (float32, float64, other strides) runs a SIMT kernel of true float32 /
    float64 arithmetic.

    Examples
    --------
    >>> import numpy as np
    >>> import cufuse
    >>> x = np.array([[1.0, 2.0]])
    >>> w_gate = np.array([[1.0, -1.0], [0.0, 0.0]])
    >>> w_up = np.array([[2.0, 3.0], [1.0, 0.0]])
    >>> np.round(cufuse.fused_gated_linear(x, w_gate, w_up), 4)
    array([[ 2.9242, -0.8068]])
    >>> cufuse.fused_gated_linear(x, w_gate, w_up, activation="relu")
    array([[4., 0.]])
    """
    code = activation_code(GATED_FN, activation)
    arrays = (x, w_gate, w_up)
    return run(_GATED, _prepared_key(GATED_FN, arrays, out, code, config), arrays, out, x, w_gate, w_up, activation,
               code, out, config)


def _check_gated(x, w_gate, w_up, activation, code, out, config):
    fn = GATED_FN
    xp, arrays = as_arrays(fn, x=x, w_gate=w_gate, w_up=w_up)
    x, w_gate, w_up = arrays["x"], arrays["w_gate"], arrays["w_up"]
    require_float(fn, "x", x)
    require_same_dtype(fn, "x", x, w_gate=w_gate, w_up=w_up)
    require_ndim(fn, "x", x, at_least=1)
    require_ndim(fn, "w_gate", w_gate, exactly=2)
    require_ndim(fn, "w_up", w_up, exactly=2)
    check_config(fn, config, GATED_VARIANTS)
    _check_weight_shape(fn, "w_gate", x, w_gate)
    if w_up.shape != w_gate.shape:
        raise ValueError(f"{fn}: argument 'w_up' expected the shape of w_gate {w_gate.shape}, got {w_up.shape}")
    out_shape = x.shape[:-1] + (w_gate.shape[1],)
    out = check_out(fn, out, shape=out_shape, dtype=x.dtype, xp=xp, inputs=arrays)
    return xp, arrays, out, (activation, code, config, out_shape)


def _numpy_gated(arrays, out, problem):
    x, w_gate, w_up = arrays["x"], arrays["w_gate"], arrays["w_up"]
    return deliver(numpy_path.fused_gated_linear(x, w_gate, w_up, activation=problem[0]), out, x.dtype)


def _bind_gated(call):
    """The call's bound plan, on x's device; None for an empty output."""
    x, w_gate, w_up = call.arrays["x"], call.arrays["w_gate"], call.arrays["w_up"]
    out, (_, code, config, out_shape) = call.out, call.problem
    call.outputs = (("out", out_shape, x.dtype, None),)
    dev = device_info(x.device.id)
    plan = plan_gated(x.shape, _elements(x), x.data.ptr, w_gate.shape, _elements(w_gate), w_gate.data.ptr,
                      _elements(w_up), w_up.data.ptr, None if out is None else out.data.ptr, x.dtype, dev, config,
                      activation=code, fn=GATED_FN)
    return BoundPlan(plan, dev) if plan.launches else None


def _linear(fn, x, weight, bias, activation, out, config):
    code = activation_code(fn, activation)
    arrays = (x, weight) if bias is None else (x, weight, bias)  # no bias: the prepared call passes None
    return run(_LINEAR, _prepared_key(fn, arrays, out, code, config), arrays, out, fn, x, weight, bias, activation,
               code, out, config)


def _check_linear(fn, x, weight, bias, activation, code, out, config):
    bias_number = bias if isinstance(bias, numbers.Real) and not isinstance(bias, bool) else None
    xp, arrays = as_arrays(fn, optional=("bias",), x=x, weight=weight, bias=None if bias_number is not None else bias)
    x, weight, bias = arrays["x"], arrays["weight"], arrays["bias"]
    require_float(fn, "x", x)
    if bias_number is not None:  # a Python number takes x's dtype, as NumPy's weak scalars do
        bias = xp.asarray(_plain_number(bias_number), dtype=x.dtype)
    require_same_dtype(fn, "x", x, weight=weight, bias=bias)
    require_ndim(fn, "x", x, at_least=1)
    require_ndim(fn, "weight", weight, exactly=2)
    check_config(fn, config, VARIANTS)
    _check_weight_shape(fn, "weight", x, weight)
    n_dim = weight.shape[1]
    if bias is not None:
        bias = _bias_vector(fn, xp, bias, n_dim)
    out_shape = x.shape[:-1] + (n_dim,)
    arrays = {"x": x, "weight": weight, "bias": bias}
    out = check_out(fn, out, shape=out_shape, dtype=x.dtype, xp=xp, inputs=arrays)
    return xp, arrays, out, (fn, activation, code, config, out_shape)


def _numpy_linear(arrays, out, problem):
    x, weight, bias = arrays["x"], arrays["weight"], arrays["bias"]
    return deliver(numpy_path.fused_linear(x, weight, bias, activation=problem[1]), out, x.dtype)


def _bind_linear(call):
    """The call's bound plan, on x's device; None for an empty output."""
    x, weight, bias = call.arrays["x"], call.arrays["weight"], call.arrays["bias"]
    out, (fn, _, code, config, out_shape) = call.out, call.problem
    call.outputs = (("out", out_shape, x.dtype, None),)
    dev = device_info(x.device.id)
    plan = plan_linear(x.shape, _elements(x), x.data.ptr, weight.shape, _elements(weight), weight.data.ptr,
                       None if bias is None else bias.strides[0] // x.dtype.itemsize,
                       None if out is None else out.data.ptr, x.dtype, dev, config, activation=code, fn=fn)
    return BoundPlan(plan, dev) if plan.launches else None


_LINEAR = Op(_check_linear, _numpy_linear, _bind_linear)
_GATED = Op(_check_gated, _numpy_gated, _bind_gated)


def _check_weight_shape(fn, name, x, weight):
    if x.shape[-1] != weight.shape[0]:
        raise ValueError(f"{fn}: argument '{name}' expected shape ({x.shape[-1]}, N) to match x's last axis of "
                         f"{x.shape[-1]}, got {weight.shape}")


def _elements(a) -> tuple:
    """a's strides in elements."""
    return tuple(s // a.itemsize for s in a.strides)


def _plain_number(value):
    """A Python or NumPy number as a plain float or int (for ``asarray`` on either path)."""
    return value.item() if isinstance(value, np.generic) else value


def _bias_vector(fn, xp, bias, n: int):
    """The bias as an (N,) view without a copy (``operands.check_bias_shape``'s rule): a row
    as it is, one value broadcast with stride 0."""
    if check_bias_shape(fn, bias.shape, n):
        return bias.reshape(n)
    return xp.lib.stride_tricks.as_strided(bias.reshape(()), shape=(n,), strides=(0,))


def _prepared_key(fn, arrays, out, activation, config):
    """The ``PreparedCall`` key of a call whose ``arrays`` (x, the weights and a given bias) and
    ``out`` are all CuPy arrays, else None. ``fn`` tells fused_linear_relu's fixed activation
    from fused_linear's and the gated form's."""
    signature = gpu_signature(*arrays) if out is None else gpu_signature(*arrays, out)
    if signature is None:
        return None
    return fn, signature, len(arrays) == 2, out is None, activation, config
