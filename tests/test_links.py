"""The link catalogue (core/model/links.py): every entry sourced, bad figures refused
with the field named, and a transfer's time its latency plus bytes over bandwidth."""
import pytest
from hypothesis import given, strategies as st

from batchlab.core.model.links import LINK_KINDS, LINKS, get_link, link_figures


def test_every_kind_is_catalogued_with_a_source():
    assert {link.kind for link in LINKS.values()} == set(LINK_KINDS)
    for link in LINKS.values():
        assert link.source and link.bandwidth > 0 and link.latency_s >= 0
    # Generations in order: each NVLink and InfiniBand generation doubles the last.
    assert LINKS["nvlink4"].bandwidth == 1.5 * LINKS["nvlink3"].bandwidth
    assert LINKS["nvlink5"].bandwidth == 2 * LINKS["nvlink4"].bandwidth
    assert LINKS["ib-ndr"].bandwidth == 2 * LINKS["ib-hdr"].bandwidth
    assert LINKS["pcie5"].bandwidth == 2 * LINKS["pcie4"].bandwidth


@pytest.mark.parametrize("bandwidth", [0, -5])
def test_zero_or_negative_bandwidth_names_the_field(bandwidth):
    with pytest.raises(ValueError, match=r"^links.toml \[x\] bandwidth_gbs: .*> 0"):
        link_figures({"kind": "RoCE", "bandwidth_gbs": bandwidth}, "links.toml [x] ")


def test_unknown_kind_and_unknown_link_are_one_line_errors():
    with pytest.raises(ValueError, match=r"^\[x\] kind: 'Ethernet' is not a link kind"):
        link_figures({"kind": "Ethernet", "bandwidth_gbs": 10}, "[x] ")
    with pytest.raises(ValueError, match=r"^deployment.link: unknown link 'nvlink9'; expected one of nvlink3"):
        get_link("nvlink9", "deployment.link")


@given(st.sampled_from(sorted(LINKS)), st.integers(0, 10**12), st.integers(1, 8))
def test_transfer_is_latency_plus_bytes_over_bandwidth(name, nbytes, lanes):
    link = LINKS[name]
    t = link.transfer_seconds(nbytes, lanes)
    assert t == link.latency_s + nbytes / (link.bandwidth * lanes)
    assert t >= link.latency_s
    assert link.transfer_seconds(nbytes + 10**6, lanes) > t  # more bytes, more time
