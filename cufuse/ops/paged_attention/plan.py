"""``plan_attention_paged`` and ``plan_kv_append``: the pure chains of the GPU calls,
problem -> config -> Plan."""
from __future__ import annotations

from ..._core.plans import Plan
from .append import AppendRows
from .problem import describe
from .select import choose


def plan_attention_paged(q_shape, q_strides, k_shape, k_strides, v_shape, v_strides, table_shape, table_strides,
                         lens_stride, dtype, causal, scale, window, softcap, return_lse, aligned, dev,
                         config=None, sink_heads=0, cu_stride=-1) -> Plan:
    """The launches of one call: strides in elements, ``window`` (left, right) with -1 for
    unlimited, ``softcap`` 0 for none, ``aligned`` (k_pages, v_pages) 16-byte base pointers,
    ``dev`` a DeviceInfo. ``config`` (``PagedMmaTile`` or ``PagedSimtRows``) replaces the
    default selection and is checked first. The plan's arrays: "q", "k_pages", "v_pages",
    "block_table", "seq_lens", "out", with ``return_lse`` "lse", with ``sink_heads`` (the sinks'
    length, 0 for none) "sinks", with ``cu_stride`` >= 0 (cu_seqlens_q's stride; q then packed
    ``(Tq, Hq, D)``) "cu_seqlens_q"."""
    problem = describe(q_shape, q_strides, k_shape, k_strides, v_shape, v_strides, table_shape, table_strides,
                       lens_stride, dtype, causal, scale, window, softcap, return_lse, aligned, sink_heads, cu_stride)
    if config is None:
        config = choose(problem, dev)
    else:
        config.check(problem, dev)
    return config.plan(problem, dev)


def plan_kv_append(new_shape, head_dim_v, page_size, max_pages, dtype, strides, batch=None, cu_stride=-1) -> Plan:
    """kv_append's launch: ``new_shape`` (B, Hkv, Nnew, D), or with ``cu_stride`` >= 0
    (cu_seqlens_new's stride) packed (Tnew, Hkv, D) over ``batch`` sequences; strides in
    elements as ``AppendRows`` lists them. The plan's arrays: "k_pages", "v_pages", "k_new",
    "v_new", "block_table", "seq_lens", packed "cu_seqlens_new"."""
    if cu_stride >= 0:
        n_new, heads_kv, head_dim = new_shape
    else:
        batch, heads_kv, n_new, head_dim = new_shape
    return AppendRows(batch=batch, heads_kv=heads_kv, n_new=n_new, head_dim=head_dim, head_dim_v=head_dim_v,
                      page_size=page_size, max_pages=max_pages, dtype=dtype, strides=tuple(strides),
                      cu_stride=cu_stride).plan()
