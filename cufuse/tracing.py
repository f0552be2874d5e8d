"""Trace one call: the kernels it launches and the device memory it allocates.

``trace(fn, *args, **kwargs)`` runs ``fn`` once as a warm-up (so compilation, module
loading and caches stay out of the picture), then once more captured into a CUDA graph,
both on a fresh non-blocking stream, with a counting allocator around CuPy's current one.
The graph's nodes are read through the CUDA driver API (``libcuda`` through ctypes:
CuPy 14 exposes a graph's handle but not its nodes, and ``cuda.bindings`` is not a
dependency). The captured graph is never launched, so the traced call computes nothing.

CuPy refuses cuBLAS calls (``cupy.matmul``) during a stream capture. A call that makes
one is run again uncaptured instead: its allocations are still counted, its kernels are
reported as not seen (``Trace.uncaptured`` says why).

What it sees: every kernel, memset and memcpy the call enqueues on CuPy's current
stream, and every allocation through CuPy's allocator (the memory pool by default).
What it does not see: work on other streams (PyTorch's, for instance) and memory a
library allocates behind CuPy's back (cuBLAS' workspace).
"""
from __future__ import annotations

import ctypes
import dataclasses
import functools
import sys

NODE_KINDS = {
    0: "kernel",
    1: "memcpy",
    2: "memset",
    3: "host",
    4: "child graph",
    5: "empty",
    6: "event wait",
    7: "event record",
    8: "semaphore signal",
    9: "semaphore wait",
    10: "mem alloc",
    11: "mem free",
    12: "batch mem op",
    13: "conditional",
}


@dataclasses.dataclass(frozen=True)
class Node:
    """One node of the captured graph; launch geometry for kernels only."""

    kind: str
    name: str = ""  # kernel name, C++ mangling shortened to ``name<...>``
    symbol: str = ""  # the kernel's full (mangled) symbol: its template arguments are its config
    grid: tuple = ()
    block: tuple = ()
    shared_mem: int = 0

    def describe(self) -> str:
        if self.kind != "kernel":
            return self.kind
        grid = "x".join(map(str, self.grid))
        block = "x".join(map(str, self.block))
        return f"kernel {self.name}  grid {grid}  block {block}  smem {self.shared_mem} B"


@dataclasses.dataclass(frozen=True)
class Trace:
    """What one call enqueued and allocated."""

    label: str
    nodes: tuple  # of Node, in the driver's listing order
    allocations: tuple  # bytes of each allocation through CuPy's allocator
    uncaptured: str = ""  # why the nodes could not be captured; empty when they were

    @property
    def kernels(self) -> tuple:
        return tuple(node for node in self.nodes if node.kind == "kernel")

    @property
    def kernel_count(self) -> int:
        return len(self.kernels)

    @property
    def allocated_bytes(self) -> int:
        return sum(self.allocations)

    def summary(self) -> str:
        others = len(self.nodes) - self.kernel_count
        text = f"{self.kernel_count} kernel{'s' * (self.kernel_count != 1)}"
        if others:
            text += f" + {others} other node{'s' * (others != 1)}"
        if self.uncaptured:
            text = f"kernels not seen ({self.uncaptured})"
        count = len(self.allocations)
        return f"{text}, {count} allocation{'s' * (count != 1)} ({format_bytes(self.allocated_bytes)})"

    def __str__(self) -> str:
        lines = [f"{self.label}: {self.summary()}"]
        lines += [f"  {node.describe()}" for node in self.nodes]
        lines += [f"  alloc {format_bytes(nbytes)}" for nbytes in self.allocations]
        return "\n".join(lines)


def format_bytes(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def trace(fn, *args, **kwargs) -> Trace:
    """Trace one call: the kernels it launches and the device memory it allocates.

    Runs ``fn(*args, **kwargs)`` once as a warm-up, then reports the graph nodes and allocations of a second
    call captured into a CUDA graph (allocations only, uncaptured, where CuPy refuses to capture it).

    Parameters
    ----------
    fn : callable
        The call to trace, typically a cufuse function on CuPy arrays.
    *args, **kwargs
        Its arguments.

    Returns
    -------
    Trace
        The label ``module.qualname`` of fn, the captured graph's nodes (``Node``: kind, kernel name and
        symbol, grid, block, shared memory) in the driver's listing order, the bytes of each allocation through
        CuPy's allocator, and ``uncaptured``: why the nodes could not be captured (empty when they were).
        ``str(trace)`` lists them; ``trace.summary()`` is one line.

    Raises
    ------
    RuntimeError
        No CUDA GPU through CuPy; a CUDA driver call reading the graph failed.
    Exception
        Whatever ``fn`` raises.

    Notes
    -----
    Both calls run on a fresh non-blocking stream (the warm-up too, so compilation, module loading and
    per-stream caches stay out of the picture), with a counting allocator around CuPy's current one. The
    captured graph is never launched, so the traced call computes nothing. Its nodes are read through the CUDA
    driver API (``libcuda`` through ctypes). CuPy refuses cuBLAS calls (``cupy.matmul``) during a stream
    capture: a call that makes one is run again uncaptured, its allocations still counted, its kernels
    reported as not seen.

    It sees every kernel, memset and memcpy the call enqueues on CuPy's current stream and every allocation
    through CuPy's allocator (the memory pool by default); not work on other streams (PyTorch's, for
    instance) nor memory a library allocates behind CuPy's back (cuBLAS' workspace).

    Examples
    --------
    On a GPU:

    >>> import cufuse
    >>> import cupy as cp  # doctest: +SKIP
    >>> x = cp.ones((1024, 1024), dtype=cp.float32)  # doctest: +SKIP
    >>> t = cufuse.trace(cufuse.softmax, x, axis=-1)  # doctest: +SKIP
    >>> print(t)  # doctest: +SKIP

    A ``Trace`` prints as its summary line, then one line a node and one an allocation:

    >>> from cufuse.tracing import Node, Trace
    >>> t = Trace("f", nodes=(Node("kernel", "k<...>", grid=(4, 1, 1), block=(128, 1, 1), shared_mem=256),),
    ...           allocations=(2048,))
    >>> print(t)
    f: 1 kernel, 1 allocation (2.0 KiB)
      kernel k<...>  grid 4x1x1  block 128x1x1  smem 256 B
      alloc 2.0 KiB
    >>> t.kernel_count, t.allocated_bytes
    (1, 2048)
    """
    count, why = cuda_device_count()
    if count == 0:
        raise RuntimeError(f"trace: needs a CUDA GPU through CuPy, found none ({why})")
    import cupy

    label = getattr(fn, "__module__", "") or ""
    label = f"{label}.{getattr(fn, '__qualname__', repr(fn))}".lstrip(".")
    sizes = []
    base_allocator = cupy.cuda.get_allocator()

    def counting_allocator(nbytes):
        sizes.append(int(nbytes))
        return base_allocator(nbytes)

    # The warm-up runs on the capturing stream too: an op may cache per-stream state
    # (a split-K workspace, say), and that first-call setup is not what a call costs.
    stream = cupy.cuda.Stream(non_blocking=True)
    cupy.cuda.Device().synchronize()  # the inputs' producers ran on other streams
    with stream:
        fn(*args, **kwargs)
        stream.synchronize()
    with stream, cupy.cuda.using_allocator(counting_allocator):
        graph, refused = _capture(stream, fn, args, kwargs)
        if refused:
            sizes.clear()
            fn(*args, **kwargs)
            stream.synchronize()
    nodes = () if refused else tuple(_graph_nodes(graph.graph))
    return Trace(label=label, nodes=nodes, allocations=tuple(sizes), uncaptured=refused)


def _capture(stream, fn, args, kwargs):
    """``(graph, "")`` of one captured call, or ``(None, why)`` where CuPy refused to
    make one of the call's library calls during a capture."""
    stream.begin_capture()
    try:
        fn(*args, **kwargs)
    except BaseException as exc:
        try:
            stream.end_capture()
        except Exception:  # the capture may already be invalidated; fn's error is the one to show
            pass
        if isinstance(exc, NotImplementedError) and "stream capture" in str(exc):
            return None, str(exc)
        raise
    return stream.end_capture(), ""


def cuda_device_count():
    """(number of CUDA devices CuPy sees, why none where it sees none)."""
    try:
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return 0, f"{type(exc).__name__}: {exc}"
    return count, "" if count else "CUDA reports no device"


class _KernelNodeParams(ctypes.Structure):
    """CUDA_KERNEL_NODE_PARAMS_v2 of cuda.h (CUDA 12 and later)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_mem", ctypes.c_uint),
        ("kernel_params", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
        ("reserved", ctypes.c_byte * 64),  # room for fields a later driver may write
    ]


@functools.lru_cache(maxsize=None)
def _driver():
    return ctypes.CDLL("nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1")


def _check(result: int, call: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _driver().cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"trace: {call} failed with {(name.value or b'CUresult %d' % result).decode()}")


def _graph_nodes(graph_handle: int) -> list:
    driver = _driver()
    graph = ctypes.c_void_p(graph_handle)
    count = ctypes.c_size_t(0)
    _check(driver.cuGraphGetNodes(graph, None, ctypes.byref(count)), "cuGraphGetNodes")
    if count.value == 0:  # the driver rejects a node array of length 0
        return []
    handles = (ctypes.c_void_p * count.value)()
    _check(driver.cuGraphGetNodes(graph, handles, ctypes.byref(count)), "cuGraphGetNodes")
    nodes = []
    for handle in handles[: count.value]:
        node = ctypes.c_void_p(handle)
        kind = ctypes.c_int(-1)
        _check(driver.cuGraphNodeGetType(node, ctypes.byref(kind)), "cuGraphNodeGetType")
        if kind.value == 0:
            nodes.append(_kernel_node(driver, node))
        else:
            nodes.append(Node(kind=NODE_KINDS.get(kind.value, f"node type {kind.value}")))
    return nodes


def _kernel_node(driver, node) -> Node:
    params = _KernelNodeParams()
    get_params = getattr(driver, "cuGraphKernelNodeGetParams_v2", None) or driver.cuGraphKernelNodeGetParams
    _check(get_params(node, ctypes.byref(params)), "cuGraphKernelNodeGetParams")
    symbol = _kernel_symbol(driver, params)
    return Node(
        kind="kernel",
        name=short_kernel_name(symbol),
        symbol=symbol,
        grid=tuple(params.grid),
        block=tuple(params.block),
        shared_mem=int(params.shared_mem),
    )


def _kernel_symbol(driver, params: _KernelNodeParams) -> str:
    """The kernel's symbol (cuFuncGetName / cuKernelGetName, CUDA 12.3+), or '?'."""
    symbol = ctypes.c_char_p()
    for getter, handle in (("cuFuncGetName", params.func), ("cuKernelGetName", params.kern)):
        function = getattr(driver, getter, None)
        if function is not None and handle and function(ctypes.byref(symbol), ctypes.c_void_p(handle)) == 0:
            return symbol.value.decode(errors="replace")
    return "?"


def short_kernel_name(symbol: str) -> str:
    """``_Z12softmax_rowsI6__halfLi256EEvPKT_`` -> ``softmax_rows<...>``;
    ``_ZN4cute6kernelI...`` -> ``cute::kernel<...>``; unmangled names are returned as is."""
    if not symbol.startswith("_Z"):
        return symbol
    pos = 2
    nested = symbol.startswith("N", pos)
    pos += nested
    parts = []
    while pos < len(symbol) and symbol[pos].isdigit():
        end = pos
        while symbol[end].isdigit():
            end += 1
        length = int(symbol[pos:end])
        parts.append(symbol[end : end + length])
        pos = end + length
        if not nested:
            break
    if not parts:
        return symbol
    return "::".join(parts) + ("<...>" if symbol.startswith("I", pos) else "")
