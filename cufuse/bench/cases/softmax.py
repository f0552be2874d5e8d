"""softmax and log_softmax: the row grid and the classes of shapes (narrow to very long
rows, misaligned lengths, strided views, leading axes, short columns, whole arrays)."""
from __future__ import annotations

import numpy as np

import cufuse

from ... import traffic
from .common import TORCH, UNFUSED, Case, Impl, log_softmax_unfused, random_values, resolve_dtype, softmax_unfused, \
    torch_inputs, torch_module
from .peers import quack_softmax

SOFTMAX_ROWS = (
    (1048576, 32),
    (262144, 128),
    (65536, 1024),
    (16384, 4096),
    (4096, 16384),
    (1024, 65536),
    (128, 262144),
    (16, 1048576),
    (4, 4194304),
)
SOFTMAX_DTYPES = ("float16", "float32")
# Classes of shapes, each with lengths that are not powers of two: (shape, axis,
# view). A view is taken of an input of ``shape``: "T" its transpose, "::2" every other
# element of its last axis. The reduced length of each class: narrow 1-256, medium 257-64K,
# long 64K-1M, very long 1M-16M elements; misaligned: lengths that are not a multiple of the
# 16-byte vector; leading and middle axes; short columns: reduced axes of 2-16 elements strided
# over millions of columns (the last two's rows off the 16-byte vector); whole array (axis=None).
SOFTMAX_CLASSES = {
    "narrow": (((671088, 100), -1, None), ((2097152, 7), -1, None), ((1048576, 32), -1, None), ((262144, 255), -1, None)),
    "medium": (((65536, 1000), -1, None), ((86369, 777), -1, None), ((16384, 3000), -1, None), ((5461, 12288), -1, None),
               ((1342, 50000), -1, None)),
    "long": (((671, 100000), -1, None), ((335, 200000), -1, None), ((134, 500000), -1, None)),
    "very long": (((22, 3000000), -1, None), ((4, 4194304), -1, None), ((1, 12000000), -1, None)),
    "misaligned": (((262144, 129), -1, None), ((261123, 257), -1, None), ((32768, 4097), -1, None), ((4000, 33331), -1, None),
                   ((97, 300007), -1, None)),
    "strided views": (((8192, 8192), -1, "::2"), ((16384, 4096), -1, "T"), ((4096, 8192), 0, "T")),
    "leading and middle axes": (((4096, 8192), 0, None), ((64, 4096, 256), 1, None), ((6, 3000000), 0, None),
                                ((12, 1000, 2000), 1, None)),
    "short columns": (((6, 3000000), 0, None), ((2, 4194304), 0, None), ((16, 1000000), 0, None),
                      ((6, 3000001), 0, None), ((16, 1000001), 0, None)),
    "whole array": (((8192, 8192), None, None), ((3000, 3001), None, None)),
}
SOFTMAX_CLASS_DTYPES = ("float16", "bfloat16", "float32")
COPY_OF_VIEW = "copy of the view"  # a CuPy elementwise copy of the same view: the strided ceiling


def _view(array, view):
    if view == "T":
        return array.T
    if view == "::2":
        return array[..., ::2]
    return array


def softmax_case(shape, dtype, axis=-1, view=None, klass="", log=False) -> Case:
    """softmax (``log``: log_softmax) of an input of ``shape`` (or its ``view``, see
    SOFTMAX_CLASSES) over ``axis``; ``klass``: the class it stands for (in the
    label). Where the input is a view, cufuse and the copy of the view allocate their out (a
    new out takes the view's layout)."""
    fn = cufuse.log_softmax if log else cufuse.softmax
    viewed_shape = np.empty(shape, dtype=np.bool_)
    viewed_shape = _view(viewed_shape, view).shape

    def make_inputs(xp, rng):
        x = _view(random_values(rng, shape, dtype), view)
        return x, (None if view else xp.empty(shape, dtype=resolve_dtype(dtype)))

    def torch_softmax(x):
        torch = torch_module()
        torch_fn = torch.log_softmax if log else torch.softmax
        if axis is None:
            return torch_fn(x.reshape(-1), 0).reshape(x.shape)
        return torch_fn(x, axis)

    def cupyx_softmax(x, out):
        import cupyx.scipy.special

        return (cupyx.scipy.special.log_softmax if log else cupyx.scipy.special.softmax)(x, axis=axis)

    def copy_of_view(x, out):
        return x.copy(order="K")

    label = (("log " if log else "") + "x".join(map(str, shape)) + ("" if view is None else f"[{view}]")
             + ("" if axis == -1 else f" axis={axis}"))
    impls = (
        Impl("cufuse", lambda x, out: fn(x, axis, out=out)),
        Impl(UNFUSED, lambda x, out: (log_softmax_unfused if log else softmax_unfused)(x, axis)),
        Impl("cupyx.scipy", cupyx_softmax),
        Impl("torch.softmax", torch_softmax, prepare=torch_inputs, needs=TORCH),
    )
    if not log:
        impls += (quack_softmax(shape, axis, view),)
    if view is not None:
        impls += (Impl(COPY_OF_VIEW, copy_of_view, peer=False),)
    return Case(
        op="softmax",
        label=(f"{klass}: " if klass else "") + label,
        dtype=dtype,
        traffic=traffic.softmax(viewed_shape, resolve_dtype(dtype)),
        metric="TB/s",
        make_inputs=make_inputs,
        impls=impls,
        klass=klass or "row grid",
    )


def softmax_class_cases(classes=None, dtypes=SOFTMAX_CLASS_DTYPES, log=False) -> list:
    """The classes (all, or those named in ``classes``), every dtype of ``dtypes``."""
    return [softmax_case(shape, dtype, axis, view, klass, log)
            for klass, members in SOFTMAX_CLASSES.items() if classes is None or klass in classes
            for shape, axis, view in members for dtype in dtypes]


def softmax_cases(quick: bool = False) -> list:
    if quick:
        return [
            softmax_case((65536, 1024), "float16"),
            softmax_case((1024, 65536), "float32"),
            softmax_case((4, 4194304), "float16"),
        ]
    cases = [softmax_case(shape, dtype) for dtype in SOFTMAX_DTYPES for shape in SOFTMAX_ROWS]
    cases += [softmax_case((16384, 4096), dtype, axis=0) for dtype in SOFTMAX_DTYPES]
    cases += [softmax_case((8192, 8192), dtype, axis=None) for dtype in SOFTMAX_DTYPES]
    return cases + softmax_class_cases()
