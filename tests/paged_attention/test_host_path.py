"""attention_paged's host path over fake GPU arrays (tests/conftest.py fake_gpu_calls): the
first call of a signature validates, plans and binds, later calls run its ``PreparedCall``;
CUFUSE_DEBUG (the page-index check) and unhashable arguments always take the full path."""
from __future__ import annotations

import numpy as np
import pytest

import cufuse
from cufuse._core.device import H200
from cufuse._core.dtypes import BFLOAT16

from ..conftest import fake_gpu_calls


@pytest.fixture
def fake_gpu(monkeypatch):
    """fake_gpu_calls on an H200, with new arrays (outputs, the plan's temporaries) over host memory."""
    from cufuse.ops.paged_attention import api

    fake = fake_gpu_calls(monkeypatch, api, H200)  # skips without CuPy
    import cupy

    monkeypatch.setattr(cupy, "empty", lambda shape, dtype=np.float64: fake[0](shape, dtype))
    return (api,) + fake


def _inputs(make_array):
    q = make_array((2, 8, 1, 64), BFLOAT16)
    k_pages, v_pages = (make_array((6, 16, 4, 64), BFLOAT16).transpose(0, 2, 1, 3) for _ in range(2))  # vLLM storage
    return q, k_pages, v_pages, make_array((2, 3), np.int32), make_array((2,), np.int32)


def test_prepared_paged_calls_plan_once(fake_gpu, monkeypatch):
    api, make_array, kernels, _ = fake_gpu
    q, k_pages, v_pages, table, lens = _inputs(make_array)
    out = make_array((2, 8, 1, 64), BFLOAT16)
    built = []
    original = api.plan_attention_paged
    monkeypatch.setattr(api, "plan_attention_paged", lambda *a: built.append(a) or original(*a))
    for _ in range(3):
        assert cufuse.attention_paged(q, k_pages, v_pages, table, lens, out=out) is out
        result, lse = cufuse.attention_paged(q, k_pages, v_pages, table, lens, window=(32, None), return_lse=True)
        assert result.shape == (2, 8, 1, 64) and lse.shape == (2, 8, 1) and lse.dtype == np.float32
    assert len(built) == 2
    launches = [launch for kernel in kernels.values() for launch in kernel.launches]
    forwards = [args for _, _, args, _ in launches if len(args) > 10]
    assert len(forwards) == 6 and all(args[:5] == (q.data.ptr, k_pages.data.ptr, v_pages.data.ptr, table.data.ptr,
                                                   lens.data.ptr) for args in forwards)
    # window entries of another type (a float side) are another key, refused by the full path
    with pytest.raises(ValueError, match="argument 'window'"):
        cufuse.attention_paged(q, k_pages, v_pages, table, lens, window=(32.0, None))
    # a prepared signature still refuses an out over an input
    with pytest.raises(ValueError, match="overlap"):
        cufuse.attention_paged(q, k_pages, v_pages, table, lens, out=q)


def test_debug_and_unhashable_calls_take_the_full_path(fake_gpu, monkeypatch):
    api, make_array, _, _ = fake_gpu
    q, k_pages, v_pages, table, lens = _inputs(make_array)
    assert api._prepared_key(q, k_pages, v_pages, table, lens, None, True, None, [8, None], None, False, None) is None
    assert api._prepared_key(q, k_pages, v_pages, table, lens, None, True, None, None, None, False, None) is not None
    monkeypatch.setenv("CUFUSE_DEBUG", "1")
    assert api._prepared_key(q, k_pages, v_pages, table, lens, None, True, None, None, None, False, None) is None


def test_packed_calls_plan_once_and_pass_the_prefix_sums(fake_gpu, monkeypatch):
    """cu_seqlens_q and cu_seqlens_new reach the kernels as pointers: nothing is read on the host."""
    api, make_array, kernels, _ = fake_gpu
    _, k_pages, v_pages, table, lens = _inputs(make_array)
    q, cu = make_array((37, 8, 64), BFLOAT16), make_array((3,), np.int32)
    built = []
    original = api.plan_attention_paged
    monkeypatch.setattr(api, "plan_attention_paged", lambda *a: built.append(a) or original(*a))
    for _ in range(3):
        result, lse = cufuse.attention_paged(q, k_pages, v_pages, table, lens, cu_seqlens_q=cu, return_lse=True)
        assert result.shape == (37, 8, 64) and lse.shape == (37, 8)
    assert len(built) == 1
    forwards = [args for kernel in kernels.values() for _, _, args, _ in kernel.launches if len(args) > 10]
    assert len(forwards) == 3 and all(cu.data.ptr in args for args in forwards)
    new_rows = make_array((37, 4, 64), BFLOAT16)
    cufuse.kv_append(k_pages, v_pages, new_rows, new_rows, table, lens, cu_seqlens_new=cu)
    appends = [launch for spec, kernel in kernels.items() if spec.name == "paged_kv_append"
               for launch in kernel.launches]
    assert len(appends) == 1 and appends[0][0] == (37 * 4,) and cu.data.ptr in appends[0][2]


def test_kv_append_plans_per_table_width(fake_gpu):
    """kv_append's bound plan holds max_pages * S (the kernel skips positions past it): two tables of
    equal strides but different widths (slices of one wider table) get their own plans."""
    _, make_array, kernels, _ = fake_gpu
    _, k_pages, v_pages, _, lens = _inputs(make_array)
    wide = make_array((2, 8), np.int32)
    new_rows = make_array((2, 4, 3, 64), BFLOAT16)
    for width in (2, 8):
        cufuse.kv_append(k_pages, v_pages, new_rows, new_rows, wide[:, :width], lens)
    appends = [args for spec, kernel in kernels.items() if spec.name == "paged_kv_append"
               for _, _, args, _ in kernel.launches]
    page_size = k_pages.shape[2]
    assert [int(args[12]) for args in appends] == [2 * page_size, 8 * page_size]  # max_keys
