"""cufuse's command line: ``cufuse {info,precompile,check-compile}`` (or ``python -m cufuse``).

- ``info``: versions, the device and its architecture, where kernels and the kernel cache
  live, and whether every kernel the default selection can pick compiles for this device.
- ``precompile``: compile every instantiation the default selection can pick for this GPU
  into the disk cache (parallel, with a progress bar), so later runs start warm.
- ``check-compile``: compile every instantiation for the given architectures without a GPU
  (CI); fails on any compile error or local-memory spill.

The compile commands need CuPy (its NVRTC binding); without it they say so in one line.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile


def _progress(done: int, total: int, spec) -> None:
    width = 30
    filled = width * done // total
    line = f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {spec.source} {spec.expression}"
    if sys.stderr.isatty():
        sys.stderr.write(line[:160].ljust(160) + ("\n" if done == total else ""))
    elif done == total or done % max(1, total // 10) == 0:  # a log gets every tenth step
        sys.stderr.write(line.lstrip("\r") + "\n")
    sys.stderr.flush()


def _versions() -> list[tuple[str, str]]:
    import ml_dtypes
    import numpy

    import cufuse

    rows = [
        ("cufuse", cufuse.__version__),
        ("python", platform.python_version()),
        ("numpy", numpy.__version__),
        ("ml_dtypes", ml_dtypes.__version__),
    ]
    try:
        import cupy

        rows.append(("cupy", cupy.__version__))
        from cupy_backends.cuda.libs import nvrtc

        rows.append(("nvrtc", ".".join(map(str, nvrtc.getVersion()))))
    except Exception as exc:  # cupy missing or no NVRTC library
        rows.append(("cupy", f"unavailable ({exc.__class__.__name__}: {exc})"))
    return rows


def _gpu():
    """(cupy, device id) or None where no CUDA GPU is usable."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        return cupy, cupy.cuda.Device().id
    except Exception:
        return None


def _compile_all(dev, arch: str, jobs: int | None, op: str | None = None) -> list:
    from ._core import loader, registry

    specs = registry.all_instantiations(dev) if op is None else [
        s for s in registry.op_instantiations(op, dev) if dev.cc >= s.min_cc]
    return loader.precompile(specs, arch, jobs=jobs, progress=_progress)


def _failures(results) -> list[str]:
    """Compile errors and spills, one line each."""
    problems = []
    for spec, entry, error in results:
        if error:
            problems.append(f"{spec.source} {spec.expression}: compile error\n{error}")
        elif entry.usage["spill_stores"] or entry.usage["spill_loads"]:
            problems.append(
                f"{spec.source} {spec.expression}: local-memory spill "
                f"({entry.usage['spill_stores']} B stores, {entry.usage['spill_loads']} B loads)"
            )
    return problems


def _print_usage_table(results, arch: str) -> None:
    print(f"{'arch':7} {'regs':>4} {'stack':>5} {'spill':>5}  kernel")
    for spec, entry, error in results:
        if entry is None:
            print(f"{arch:7} {'-':>4} {'-':>5} {'-':>5}  {spec.source} {spec.expression}  COMPILE ERROR")
            continue
        usage = entry.usage
        spill = usage["spill_stores"] + usage["spill_loads"]
        print(f"{arch:7} {usage['registers']:4d} {usage['stack']:5d} {spill:5d}  {spec.source} {spec.expression}")


def cmd_info(args) -> int:
    from ._core import device, loader

    for name, version in _versions():
        print(f"{name:10} {version}")
    print(f"{'kernels':10} {loader.KERNELS_DIR}")
    print(f"{'cache':10} {loader.cache_dir()}")
    gpu = _gpu()
    if gpu is None:
        print(f"{'device':10} no CUDA GPU found: cufuse runs its NumPy reference path on numpy arrays")
        return 0
    cupy, device_id = gpu
    dev = device.device_info(device_id)
    props = cupy.cuda.runtime.getDeviceProperties(device_id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    arch = loader.arch_for(dev.cc)
    print(f"{'device':10} {device_id}: {name}, compute capability {dev.cc // 10}.{dev.cc % 10}, {dev.sm_count} SMs, "
          f"{props['totalGlobalMem'] / 2**30:.1f} GiB, {dev.max_smem_per_block // 1024} KiB shared memory per block")
    print(f"{'arch':10} {arch}")
    print(f"{'cuda':10} runtime {cupy.cuda.runtime.runtimeGetVersion()}, driver {cupy.cuda.runtime.driverGetVersion()}")
    results = _compile_all(dev, arch, args.jobs)
    problems = _failures(results)
    print(f"{'kernels':10} {len(results) - len(problems)}/{len(results)} instantiations compile cleanly for {arch}")
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


def cmd_precompile(args) -> int:
    from ._core import device, loader

    gpu = _gpu()
    if gpu is None:
        print("cufuse precompile: no CUDA GPU found; nothing to compile for (see 'check-compile' to compile without one)")
        return 1
    dev = device.device_info(gpu[1])
    arch = loader.arch_for(dev.cc)
    results = _compile_all(dev, arch, args.jobs)
    fresh = sum(1 for _, entry, _ in results if entry is not None and entry.compiled_now)
    problems = _failures(results)
    print(f"cufuse precompile: {len(results)} instantiations for {arch}, {fresh} newly compiled, "
          f"{len(problems)} problems; cache {loader.cache_dir()}")
    for problem in problems:
        print(f"  {problem}")
    return 1 if problems else 0


def cmd_check_compile(args) -> int:
    from ._core import device

    status = 0
    with tempfile.TemporaryDirectory(prefix="cufuse-check-") as scratch:
        os.environ["CUFUSE_CACHE_DIR"] = scratch  # inherited by the spawned compile workers
        for arch in args.arch:
            dev = device.REFERENCE_DEVICES.get(arch)
            if dev is None:
                print(f"cufuse check-compile: argument '--arch' expected one of {sorted(device.REFERENCE_DEVICES)}, got {arch!r}")
                return 2
            results = _compile_all(dev, arch, args.jobs, args.op)
            _print_usage_table(results, arch)
            problems = _failures(results)
            print(f"{arch}: {len(results) - len(problems)}/{len(results)} instantiations compile without spills")
            for problem in problems:
                print(f"  FAIL {problem}")
            status |= bool(problems)
    return status


DESCRIPTION = ("Fused GPU kernels for NumPy-style Python: show the installation and device (info), "
               "compile the kernels ahead of use (precompile), or compile them without a GPU (check-compile).")


def program_name() -> str:
    """How the user started the command line: the console script or ``python -m cufuse``."""
    return "cufuse" if os.path.basename(sys.argv[0]) == "cufuse" else "python -m cufuse"


def _cupy_missing() -> str | None:
    """One line saying why the compile commands cannot run, or None."""
    try:
        from cupy_backends.cuda.libs import nvrtc  # noqa: F401
    except Exception as exc:  # cupy missing, or no NVRTC library
        return (f"{program_name()}: this command needs CuPy with NVRTC (cufuse's extra 'cuda13' or 'cuda12', from a "
                f"clone: pip install -e \".[cuda13]\"); {type(exc).__name__}: {exc}")
    return None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog=program_name(), description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("info", "versions, device, kernel cache, and whether every kernel compiles"),
        ("precompile", "compile every kernel the configs can pick for this GPU"),
        ("check-compile", "compile every kernel for the given architectures without a GPU (CI)"),
    ):
        command = sub.add_parser(name, help=help_text)
        command.add_argument("--jobs", type=int, default=None, help="parallel compile processes (default: CPU count)")
        if name == "check-compile":
            command.add_argument("--arch", action="append", default=None, help="sm_90a, sm_90 or sm_80 (repeatable)")
            command.add_argument("--op", default=None, help="only this op's kernels (a name of cufuse._core.registry.OPS)")
    args = parser.parse_args(argv)
    if args.command == "check-compile" and not args.arch:
        args.arch = ["sm_90a", "sm_80"]
    if args.command in ("precompile", "check-compile"):
        missing = _cupy_missing()
        if missing:
            print(missing, file=sys.stderr)
            return 2
    handler = {"info": cmd_info, "precompile": cmd_precompile, "check-compile": cmd_check_compile}[args.command]
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
