"""backend/linear.py: oneDNN matmuls padded to a bounded set of row counts give each row
the unpadded result, and a server meets few kernel shapes."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

torch = pytest.importorskip("torch")

from batchlab.backend.linear import EXACT_ROWS, Linear, onednn_available, padded_rows  # noqa: E402

pytestmark = pytest.mark.backend


@given(st.integers(1, 1 << 16))
def test_padded_rows_are_few_and_at_most_an_eighth_more(rows):
    b = padded_rows(rows)
    assert b >= rows and (b == rows if rows <= EXACT_ROWS else b - rows < rows / 8)
    assert padded_rows(b) == b  # a padded count is its own bucket


def test_padded_row_counts_are_bounded():
    assert len({padded_rows(r) for r in range(1, 8193)}) == EXACT_ROWS + 8 * 7


@pytest.mark.skipif(not onednn_available(), reason="torch without oneDNN")
@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 600), residual=st.booleans(), bias=st.booleans())
def test_padded_onednn_rows_equal_the_unpadded_product(rows, residual, bias):
    g = torch.Generator().manual_seed(rows)
    w = torch.randn(48, 32, generator=g)
    b = torch.randn(48, generator=g) if bias else None
    x = torch.randn(rows, 32, generator=g)
    r = torch.randn(rows, 48, generator=g) if residual else None
    y = Linear(w, b, "onednn")(x, r)
    ref = Linear(w, b, "torch")(x, None if r is None else r.clone())
    assert y.shape == (rows, 48)
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    # Exactly what the same oneDNN kernel gives without padding, for a padded count.
    if padded_rows(rows) != rows:
        op = torch.ops.mkldnn._linear_pointwise
        packed = torch.ops.mkldnn._reorder_linear_weight(w, 64)
        exact = (op.binary(x, r, packed, b, "add") if r is not None else op(x, packed, b, "none", [], ""))
        assert torch.equal(y, exact)
