"""Compile kernel instantiations to PTX with cufuse's NVRTC options and write them normalised
(mangled names replaced by their order of first appearance), one file per instantiation.

    python experiments/restructure/ptx_dump.py OUT_DIR ARCH [OP]

ARCH is sm_90a or sm_80 (PTX for compute_90a / compute_80): every instantiation cufuse lists
for the reference device of ARCH (after the restructure, OP limits it to one op's). Works on the
code before the restructure (``cufuse._configs``) and after it (``cufuse._core``).
The file name is ``kernel<args>`` with the template arguments as compiled; the comparison
(``ptx_compare.py``) maps renamed arguments.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from concurrent.futures import ProcessPoolExecutor

sys.path.insert(0, ".")

_MANGLED = re.compile(r"\b_Z[A-Za-z0-9_]+")


def normalise(ptx: str) -> str:
    names: dict = {}

    def rename(match):
        return names.setdefault(match.group(0), f"SYM{len(names)}")

    lines = [line for line in ptx.splitlines() if not line.startswith("//")]
    return _MANGLED.sub(rename, "\n".join(lines)) + "\n"


def _specs(arch, op=None):
    try:  # the code before the restructure first: an editable install may expose the new modules too
        from cufuse import _configs

        return _configs.all_instantiations(_configs.REFERENCE_DEVICES[arch])
    except ImportError:
        from cufuse._core import device as core_device
        from cufuse._core import registry

        dev = core_device.REFERENCE_DEVICES[arch]
        if op is not None:
            return [s for s in registry.op_instantiations(op, dev) if dev.cc >= s.min_cc]
        return registry.all_instantiations(dev)


def _compile(job):
    spec, arch = job
    from cupy_backends.cuda.libs import nvrtc

    try:
        from cufuse import _loader as loader
    except ImportError:
        from cufuse._core import loader
    options = loader._BASE_OPTIONS + loader._include_options() + (f"-arch=compute_{arch[3:]}",)
    program = nvrtc.createProgram(loader._source_text(spec), "ptx_dump", (), ())
    try:
        nvrtc.addNameExpression(program, spec.expression)
        try:
            nvrtc.compileProgram(program, options)
        except nvrtc.NVRTCError:
            return spec.expression, "COMPILE ERROR\n" + nvrtc.getProgramLog(program)
        ptx = nvrtc.getPTX(program)
    finally:
        nvrtc.destroyProgram(program)
    if isinstance(ptx, bytes):
        ptx = ptx.decode()
    return spec.expression, normalise(ptx.rstrip("\0"))


def main(out_dir, arch, op=None):
    os.makedirs(out_dir, exist_ok=True)
    specs = list(dict.fromkeys(_specs(arch, op)))
    index = {}
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        for done, (expression, ptx) in enumerate(pool.map(_compile, [(s, arch) for s in specs]), 1):
            digest = hashlib.sha256(ptx.encode()).hexdigest()[:20]
            index[expression] = digest
            with open(os.path.join(out_dir, digest + ".ptx"), "w") as handle:
                handle.write(ptx)
            if done % 25 == 0:
                print(f"{done}/{len(specs)}", flush=True)
    with open(os.path.join(out_dir, "index.json"), "w") as handle:
        json.dump(index, handle, indent=0, sort_keys=True)
    print(f"{len(specs)} instantiations for {arch} -> {out_dir}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
