"""The chain every public call runs: its prepared call where one is kept; else the op's checks,
then the NumPy path, or on the GPU the op's bound plan, the outputs, the launch, and the bound
plan kept as the call's prepared call.

An op hands the driver its hooks at import (``Op``); its public functions compute their
prepared-call key (None: not preparable) and call ``run``. The driver names no op.
"""
from __future__ import annotations

import numpy as np

from .device import device_info
from .plans import PLANS, BoundPlan, PreparedCall, new_array


class Op:
    """An op's hooks. ``check(*args)``: the checks of a call's arguments (the errors naming the
    function), then ``(xp, arrays, out, problem)`` as ``Call`` names them, ``xp`` numpy or cupy.
    ``numpy(arrays, out, problem)``: the public result on NumPy inputs. ``bind(call)``: on the
    device of the call's first array, sets the call's ``outputs`` and returns what runs its
    arrays by name: a ``BoundPlan``, or the op's own callable (an explicit copy around one, a
    fill), None where nothing runs; it may update the call's arrays and ``prepare``."""

    __slots__ = ("check", "numpy", "bind")

    def __init__(self, check, numpy, bind):
        self.check, self.numpy, self.bind = check, numpy, bind


class Call:
    """A checked call on the GPU. ``arrays``: the kernels' arrays by name, outputs aside (None:
    a null pointer), the first one's device runs it. ``out``: the caller's, checked (None: none
    given). ``problem``: the op's own facts. ``outputs``: (name, shape, dtype, order) each, as
    ``PreparedCall`` takes them ("out" is the caller's when given). ``prepare``: whether what
    ran becomes the ``PreparedCall`` of the call's key."""

    __slots__ = ("arrays", "out", "problem", "outputs", "prepare")

    def __init__(self, arrays, out, problem):
        self.arrays, self.out, self.problem, self.outputs, self.prepare = arrays, out, problem, (), True


def run(op, key, arrays, out, *args):
    """A public call: the ``PreparedCall`` of ``key`` (None: none) on the caller's ``arrays``
    and ``out`` where one is kept and takes them; else ``op.check(*args)``, then the NumPy path
    or the GPU path."""
    if key is not None:
        prepared = PLANS.prepared(key)
        if prepared is not None:
            result = prepared(arrays, out)
            if result is not None:
                return result
    xp, arrays, out, problem = op.check(*args)
    if xp is np:
        return op.numpy(arrays, out, problem)
    return _gpu(op, key, Call(arrays, out, problem))


def _gpu(op, key, call):
    """The GPU path on the device of the call's first array: what ``op.bind`` gives runs the
    call's arrays and its new outputs, and is kept as the ``PreparedCall`` of ``key`` (None:
    none); the outputs are the results (none: None)."""
    import cupy

    device_id = next(iter(call.arrays.values())).data.device_id
    if cupy.cuda.runtime.getDevice() != device_id:
        with cupy.cuda.Device(device_id):
            return _gpu(op, key, call)
    bound = op.bind(call)
    named = dict(call.arrays)
    results = []
    for name, shape, dtype, order in call.outputs:
        result = call.out if name == "out" and call.out is not None else new_array(shape, dtype, order)
        named[name] = result
        results.append(result)
    if bound is not None:
        bound(named)
        if key is not None and call.prepare:
            PLANS.put(key, PreparedCall(bound, call.arrays, call.outputs))
    if not results:  # an op that writes in place
        return None
    return tuple(results) if len(results) > 1 else results[0]


def bound_plan(key, device_id, make_plan):
    """The ``BoundPlan`` of a layout ``key`` on a device, kept in ``PLANS``: on a miss
    ``make_plan(dev)`` gives its ``Plan``, or None for a layout the op copies first (then None,
    remembered as such)."""
    bound = PLANS.get(key)
    if bound is None:
        dev = device_info(device_id)
        plan = make_plan(dev)
        bound = PLANS.put(key, _COPY if plan is None else BoundPlan(plan, dev))
    return None if bound is _COPY else bound


_COPY = "copy"  # a layout without a plan: the op's explicit-copy path
