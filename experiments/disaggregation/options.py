"""The [deployment] table's flags (simulate): any of them makes a run disaggregated."""
from __future__ import annotations

import argparse

from batchlab.core.model.links import LINKS


def add_deployment_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("disaggregation ([deployment]: prefill and decode pools)")
    g.add_argument("--prefill-replicas", dest="de_prefill_replicas", type=int, metavar="N")
    g.add_argument("--decode-replicas", dest="de_decode_replicas", type=int, metavar="N")
    g.add_argument("--prefill-tp", dest="de_prefill_tp", type=int, metavar="N",
                   help="tensor-parallel GPUs a prefill replica")
    g.add_argument("--decode-tp", dest="de_decode_tp", type=int, metavar="N",
                   help="tensor-parallel GPUs a decode replica")
    g.add_argument("--link", dest="de_link", metavar="NAME",
                   help=f"the link the KV crosses: {' | '.join(LINKS)} (default ib-ndr)")
    g.add_argument("--link-gbs", dest="de_link_gbs", type=float, metavar="GB/S",
                   help="its bandwidth one way per GPU, replacing the catalogue's")
    g.add_argument("--link-latency-us", dest="de_link_latency_us", type=float, metavar="US",
                   help="its fixed cost per transfer, replacing the catalogue's")
    g.add_argument("--kv-overlap", dest="de_overlap", choices=("none", "layers"),
                   help="none: the KV is sent whole after the prefill (vLLM's NIXL connector, the "
                        "default); layers: each layer's as it finishes (LMCache layer-wise, Splitwise)")
    g.add_argument("--prefill-router", dest="de_prefill_router", metavar="NAME")
    g.add_argument("--decode-router", dest="de_decode_router", metavar="NAME")
