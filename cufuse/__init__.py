"""cufuse: fused GPU kernels for NumPy-style Python.

Every op takes ``cupy.ndarray`` inputs (runs the CUDA kernels of ``kernels/``) or
``numpy.ndarray`` inputs (runs the float64 oracles of ``cufuse.reference``).
"""
from . import reference, traffic
from .attention import attention
from .linear import fused_linear_relu
from .softmax import log_softmax, softmax
from .trace import trace

__version__ = "0.1.0"
__all__ = ["attention", "fused_linear_relu", "log_softmax", "reference", "softmax", "trace", "traffic", "__version__"]
