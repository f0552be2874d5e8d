"""``plan_attention`` / ``plan_varlen``: the pure chain of a GPU call, problem -> config -> Plan."""
from __future__ import annotations

from ..._core.plans import Plan
from .problem import describe
from .select import choose, choose_varlen
from .varlen_problem import VarlenProblem


def plan_attention(q_shape, q_strides, k_shape, k_strides, v_shape, v_strides, dtype, causal, scale, return_lse,
                   aligned, dev, config=None, window=None, softcap=None, sink_heads=0) -> Plan:
    """The launches of one call: strides in elements, ``scale`` the final one, ``aligned``
    (q, k, v) 16-byte aligned base pointers, ``dev`` a DeviceInfo. ``config`` (a variant of
    mma, wgmma, decode or simt) replaces the default selection and is checked first. ``window``
    None or (left, right) of None / non-negative ints, ``softcap`` None or c > 0, ``sink_heads``
    the sinks' length (0: none). The plan's arrays: "q", "k", "v", "out", with ``return_lse``
    "lse", with sinks "sinks"."""
    problem = describe(q_shape, q_strides, k_shape, k_strides, v_shape, v_strides, dtype, causal, scale, return_lse,
                       aligned, window, softcap, sink_heads)
    if config is None:
        config = choose(problem, dev)
    else:
        config.check(problem, dev)
    return config.plan(problem, dev)


def plan_varlen(problem: VarlenProblem, dev, config=None) -> Plan:
    """The launch of one attention_varlen call (``varlen_problem.describe_varlen``): ``config``
    (``VarlenWgmmaTile`` or ``VarlenSimtRows``) replaces the default selection and is checked first.
    The plan's arrays: "q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "out", with ``return_lse``
    "lse", with sinks "sinks"."""
    if config is None:
        config = choose_varlen(problem, dev)
    else:
        config.check(problem, dev)
    return config.plan(problem, dev)
