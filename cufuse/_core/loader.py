"""The kernel loader: the only module that creates ``cupy.RawModule`` objects.

``get_kernel(KernelSpec("softmax/rows.cu", "softmax_rows", ("__half", 256, 4)))`` compiles
the template instantiation ``softmax_rows<__half, 256, 4>`` of ``kernels/softmax/rows.cu``
with NVRTC, keeps the cubin in an on-disk cache and returns a ``cupy.RawKernel``.

Why an own cache instead of CuPy's: the same NVRTC call (``compile_spec``) then serves
the run-time path, ``python -m cufuse precompile`` (a process pool, no GPU context needed)
and CI's compile check on machines without a GPU, where CuPy's ``RawModule`` refuses to
compile. The cache key holds a hash of the entry file and every header it includes
(``source_hash``; written into the compiled source too), so editing one op's kernels
recompiles that op only, and editing a header recompiles what includes it.

Kernel sources include each other by their path under ``kernels/`` (``#include
"common/mma.cuh"``): NVRTC gets ``-I kernels/``, and ``source_hash`` follows the same paths.
"""
from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import re
import struct
import tempfile
import threading
import time
from functools import lru_cache
from pathlib import Path

logger = logging.getLogger("cufuse")

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # cufuse/
# A wheel ships the sources as cufuse/kernels/; a source tree (or an editable install)
# keeps them in the top-level kernels/ beside the package.
KERNELS_DIR = next(
    (d for d in (_PACKAGE_DIR / "kernels", _PACKAGE_DIR.parent / "kernels") if d.is_dir()),
    _PACKAGE_DIR / "kernels",
)

# NVRTC options shared by every kernel. No -ftz or fast-math: float32 stays IEEE float32,
# kernels ask for fast intrinsics (exp2f, ex2.approx) explicitly where they want them.
_BASE_OPTIONS = ("--std=c++17", "-default-device", "-Xptxas=-v")


def debug_enabled() -> bool:
    """CUFUSE_DEBUG set (not "" or "0"): log kernel builds and check what the fast paths trust (page indices)."""
    return os.environ.get("CUFUSE_DEBUG", "") not in ("", "0")


def _log(message: str) -> None:
    if debug_enabled():
        if not logger.handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("cufuse: %(message)s"))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
        logger.info(message)


@dataclasses.dataclass(frozen=True)
class KernelSpec:
    """One template instantiation of one kernel in ``kernels/<source>``.

    ``template_args`` are ints, bools or C type names; ``min_cc`` is the lowest compute
    capability (major*10+minor) the kernel compiles for (90 for wgmma/cluster kernels).
    """

    source: str
    name: str
    template_args: tuple = ()
    min_cc: int = 0

    @property
    def expression(self) -> str:
        if not self.template_args:
            return self.name
        return f"{self.name}<{', '.join(_format_arg(a) for a in self.template_args)}>"


def _format_arg(arg) -> str:
    if isinstance(arg, bool):
        return "true" if arg else "false"
    return str(arg)


@dataclasses.dataclass(frozen=True)
class CompiledKernel:
    binary: bytes  # cubin (or PTX where NVRTC does not know the device's architecture)
    lowered_name: str
    log: str


class KernelCompileError(RuntimeError):
    """NVRTC rejected a kernel; the message holds the compiler's log."""


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"', re.MULTILINE)


def included_sources(source: str) -> tuple[str, ...]:
    """``source`` and every file under ``kernels/`` it includes, directly or not (quoted
    includes are paths from ``kernels/``; system headers such as ``<cuda_fp16.h>`` come from
    CuPy and NVRTC, whose versions are in the cache key)."""
    seen, pending = [], [source]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.append(name)
        path = KERNELS_DIR / name
        if path.is_file():
            pending.extend(_INCLUDE.findall(path.read_text()))
    return tuple(sorted(seen))


@lru_cache(maxsize=None)
def source_hash(source: str) -> str:
    """sha256 over ``source`` and the headers it includes (names and contents)."""
    digest = hashlib.sha256()
    for name in included_sources(source):
        path = KERNELS_DIR / name
        digest.update(name.encode())
        digest.update(b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"missing")
        digest.update(b"\0")
    return digest.hexdigest()


def arch_for(cc: int) -> str:
    """The NVRTC target for a compute capability (major*10+minor).

    Only 9.0 gets the architecture-specific ``sm_90a`` (wgmma, setmaxnreg); every other
    device gets its plain ``sm_XY``.
    """
    return "sm_90a" if cc == 90 else f"sm_{cc}"


def _source_text(spec: KernelSpec) -> str:
    # The source hash sits in the source itself, so any cache keyed on the source text
    # (ours, CuPy's, NVRTC's) sees a header edit.
    return f'// cufuse kernel source {source_hash(spec.source)}\n#include "{spec.source}"\n'


def _include_options() -> tuple:
    import cupy._core.core as cupy_core  # CuPy's own include set: cuda_fp16.h, cuda_bf16.h, CCCL

    return (f"-I{KERNELS_DIR}",) + tuple(cupy_core.assemble_cupy_compiler_options(()))


def _target_option(arch: str) -> tuple[str, str]:
    from cupy_backends.cuda.libs import nvrtc

    cc = int(re.sub(r"\D", "", arch))
    supported = nvrtc.getSupportedArchs()
    if cc in supported:
        return f"-arch={arch}", "cubin"
    # A device newer than this NVRTC: emit PTX for the newest known target, the driver JITs it.
    return f"-arch=compute_{max(c for c in supported if c <= cc)}", "ptx"


def whole_elf(image: bytes) -> bytes:
    """A cubin padded to the end of its section and program header tables: CuPy's getCUBIN drops
    the image's trailing zero bytes, which the driver tolerates and nvdisasm does not."""
    phoff, shoff = struct.unpack_from("<QQ", image, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", image, 0x36)
    end = max(phoff + phentsize * phnum, shoff + shentsize * shnum)
    return image + bytes(max(0, end - len(image)))


def compile_spec(spec: KernelSpec, arch: str) -> CompiledKernel:
    """Compile one instantiation with NVRTC for ``arch`` (e.g. ``"sm_90a"``). Needs no GPU."""
    from cupy_backends.cuda.libs import nvrtc

    target, kind = _target_option(arch)
    options = _BASE_OPTIONS + _include_options() + (target,)
    program = nvrtc.createProgram(_source_text(spec), f"cufuse_{spec.source.replace('/', '_')}", (), ())
    try:
        nvrtc.addNameExpression(program, spec.expression)
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError:
            raise KernelCompileError(
                f"cufuse: NVRTC failed to compile {spec.source} {spec.expression} for {arch}:\n"
                + nvrtc.getProgramLog(program)
            ) from None
        binary = nvrtc.getCUBIN(program) if kind == "cubin" else nvrtc.getPTX(program)
        if isinstance(binary, str):
            binary = binary.encode()
        if kind == "cubin":
            binary = whole_elf(binary)
        return CompiledKernel(binary, nvrtc.getLoweredName(program, spec.expression), nvrtc.getProgramLog(program))
    finally:
        nvrtc.destroyProgram(program)


_PTXAS_FUNCTION = re.compile(r"Function properties for (\S+)")
_PTXAS_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_REGS = re.compile(r"Used (\d+) registers")


def resource_usage(log: str) -> dict:
    """Registers, stack frame and spill bytes from the ptxas part of an NVRTC log."""
    usage = {"registers": 0, "stack": 0, "spill_stores": 0, "spill_loads": 0}
    for match in _PTXAS_SPILL.finditer(log):
        usage["stack"] = max(usage["stack"], int(match.group(1)))
        usage["spill_stores"] += int(match.group(2))
        usage["spill_loads"] += int(match.group(3))
    for match in _PTXAS_REGS.finditer(log):
        usage["registers"] = max(usage["registers"], int(match.group(1)))
    return usage


def cache_dir() -> Path:
    """Where compiled kernels live: ``$CUFUSE_CACHE_DIR`` or ``~/.cache/cufuse``."""
    root = os.environ.get("CUFUSE_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "cufuse"


@lru_cache(maxsize=None)
def _nvrtc_version() -> str:
    from cupy_backends.cuda.libs import nvrtc

    return ".".join(map(str, nvrtc.getVersion()))


def _cache_path(spec: KernelSpec, arch: str) -> Path:
    key = "\0".join((source_hash(spec.source), spec.source, spec.expression, arch, _nvrtc_version(), *_BASE_OPTIONS))
    return cache_dir() / f"{spec.name}-{hashlib.sha256(key.encode()).hexdigest()[:32]}.bin"


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


@dataclasses.dataclass(frozen=True)
class CacheEntry:
    path: Path  # the cubin (or PTX) on disk
    lowered_name: str
    log: str  # NVRTC's log, ptxas resource report included
    compiled_now: bool

    @property
    def usage(self) -> dict:
        return resource_usage(self.log)


def ensure_compiled(spec: KernelSpec, arch: str) -> CacheEntry:
    """Compile ``spec`` for ``arch`` into the disk cache unless it is there already."""
    path = _cache_path(spec, arch)
    name_path, log_path = path.with_suffix(".name"), path.with_suffix(".log")
    if path.exists() and name_path.exists() and log_path.exists():
        return CacheEntry(path, name_path.read_text(), log_path.read_text(), False)
    start = time.perf_counter()
    compiled = compile_spec(spec, arch)
    usage = resource_usage(compiled.log)
    _log(
        f"compiled {spec.source} {spec.expression} for {arch} in {time.perf_counter() - start:.2f} s "
        f"({usage['registers']} registers, {usage['spill_stores']} B spill stores)"
    )
    # The binary goes last: its presence marks a complete entry for other processes.
    _write_atomic(name_path, compiled.lowered_name.encode())
    _write_atomic(log_path, compiled.log.encode())
    _write_atomic(path, compiled.binary)
    return CacheEntry(path, compiled.lowered_name, compiled.log, True)


_kernels: dict = {}
_smem_limits: dict = {}  # the dynamic shared-memory bytes each cached kernel may launch with now
_keys: dict = {}  # id(kernel) -> its key in _kernels
_kernel_locks: dict = {}
_registry_lock = threading.Lock()


@lru_cache(maxsize=None)
def device_cc(device_id: int) -> int:
    import cupy

    major, minor = cupy.cuda.Device(device_id).compute_capability
    return int(major) * 10 + int(minor)


def get_kernel(spec: KernelSpec, dynamic_smem: int = 0):
    """The ``cupy.RawKernel`` of ``spec`` on the current device, compiled on first use.
    ``dynamic_smem`` raises the kernel's dynamic shared-memory limit where a launch needs
    more than the default (48 KB less the kernel's static shared memory)."""
    import cupy

    key = (cupy.cuda.runtime.getDevice(), spec)
    kernel = _kernels.get(key)
    if kernel is None:
        kernel = _load(key)
    if dynamic_smem > _smem_limits[key]:
        _raise_smem_limit(key, kernel, dynamic_smem)
    return kernel


def allow_dynamic_smem(kernel, dynamic_smem: int) -> None:
    """Let a kernel ``get_kernel`` returned launch with ``dynamic_smem`` bytes of dynamic
    shared memory (a launch that pads its blocks' shared memory: ``launch.pdl_smem``)."""
    key = _keys[id(kernel)]
    if dynamic_smem > _smem_limits[key]:
        _raise_smem_limit(key, kernel, dynamic_smem)


def _raise_smem_limit(key, kernel, dynamic_smem: int) -> None:
    with _registry_lock:
        if dynamic_smem > _smem_limits[key]:
            kernel.max_dynamic_shared_size_bytes = dynamic_smem
            _smem_limits[key] = dynamic_smem


def _load(key):
    """Compile (or find in the disk cache) and load one kernel; one thread per key does it."""
    import cupy

    device_id, spec = key
    with _registry_lock:
        lock = _kernel_locks.setdefault(key, threading.Lock())
    with lock:
        kernel = _kernels.get(key)
        if kernel is None:
            entry = ensure_compiled(spec, arch_for(device_cc(device_id)))
            kernel = cupy.RawModule(path=str(entry.path)).get_function(entry.lowered_name)
            # Without an explicit limit, static plus dynamic shared memory must fit in 48 KB.
            _smem_limits[key] = 48 * 1024 - kernel.shared_size_bytes
            _kernels[key] = kernel
            _keys[id(kernel)] = key  # kernels are never dropped, so ids stay theirs
    return kernel


def _compile_job(job):
    spec, arch = job
    try:
        return spec, ensure_compiled(spec, arch), None
    except Exception as exc:  # reported by the caller, with the others
        return spec, None, str(exc)


def precompile(specs, arch: str, *, jobs: int | None = None, progress=None) -> list:
    """Compile every spec for ``arch`` into the disk cache in parallel processes (no GPU
    needed). Returns ``(spec, CacheEntry or None, error or None)`` per spec, in order;
    ``progress(done, total, spec)`` is called as each one finishes.
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    specs = list(dict.fromkeys(specs))
    if not specs:
        return []
    jobs = jobs or max(1, min(len(specs), os.cpu_count() or 1))
    results = []
    # spawn, not fork: the parent may hold a CUDA context, which a forked child must not touch.
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
        for done, result in enumerate(pool.map(_compile_job, [(s, arch) for s in specs]), 1):
            results.append(result)
            if progress:
                progress(done, len(specs), result[0])
    return results
