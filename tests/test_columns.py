"""core/columns.py extends a typed column exactly as array.fromlist does: the same bytes,
and for a value the column cannot hold an error with the column left as it was."""
from __future__ import annotations

from array import array

import pytest
from hypothesis import given
from hypothesis import strategies as st

from batchlab.core.columns import extend

INT64 = st.integers(-2**63, 2**63 - 1)
VALUES = {"q": st.lists(INT64, max_size=300),
          "d": st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), INT64), max_size=300)}


@given(st.sampled_from("qd").flatmap(lambda tc: st.tuples(st.just(tc), VALUES[tc], VALUES[tc])))
def test_extend_writes_what_fromlist_writes(case):
    typecode, before, values = case
    want, got = array(typecode, before), array(typecode, before)
    want.fromlist(values)
    extend(got, values)
    assert got.tobytes() == want.tobytes()


@given(st.lists(INT64, max_size=20), st.sampled_from([2**63, -2**63 - 1, 1.5, "1"]), st.integers(0, 20))
def test_a_value_the_column_cannot_hold_leaves_it_unchanged(before, bad, at):
    values = [7] * 20
    values.insert(at, bad)
    col = array("q", before)
    with pytest.raises(Exception):
        array("q").fromlist(values)
    with pytest.raises(Exception):
        extend(col, values)
    assert col.tolist() == before
