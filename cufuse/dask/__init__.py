"""cufuse over Dask arrays, when data outgrows one GPU: the same functions, taking Dask arrays
of NumPy or CuPy chunks and returning lazy Dask arrays with the right chunks, dtype and meta.

Where a function's reduction lies inside each chunk it runs one cufuse call a chunk. Where it
spans chunks, each chunk contributes partials that merge by the online rule (a running max
``m`` and the sums rescaled by ``exp(m - m')``): softmax rows across chunks (partial
logsumexps, then a second pass), logsumexp rows (signed partials), attention keys across chunks
(each chunk's output and lse), linear's and the gated form's K across chunks (partial products
summed, then bias and activation once: that epilogue cannot fuse into the GEMM). With
dask-cuda's ``LocalCUDACluster`` (one worker a GPU) the chunks run where they live.

Needs the optional extra ``dask`` (``pip install "cufuse[dask]"``; from a clone: ``pip install -e ".[dask]"``):
dask[array] and distributed; GPU clusters add the extra ``dask-cuda``. The rest of cufuse never imports Dask.
"""
try:
    import dask.array  # noqa: F401
except ImportError as exc:  # the extra is missing: say how to get it
    raise ImportError(f'cufuse.dask needs Dask ({exc}): pip install "cufuse[dask]" (from a clone: '
                      f'pip install -e ".[dask]")') from exc

from ._attention import attention  # noqa: E402
from ._linear import fused_gated_linear, fused_linear, fused_linear_relu  # noqa: E402
from ._logsumexp import logsumexp  # noqa: E402
from ._softmax import log_softmax, softmax  # noqa: E402

__all__ = ["attention", "fused_gated_linear", "fused_linear", "fused_linear_relu", "log_softmax", "logsumexp",
           "softmax"]
