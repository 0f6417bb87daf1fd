"""A prefill/decode hand-off: what a decode replica receives when a prefill replica
finishes a prompt, and what moving its KV costs over the link between them.

The prefill replica serves the request with one output token (a proxy sends it there
with max_tokens=1, as vLLM's disaggregated proxies do) and samples the first token: the
client's first token comes from the prefill side. The decode replica then holds a
sequence that has generated that token and whose prompt KV is elsewhere
(Sequence.kv_elsewhere, core/kv_home.py): admission gives it blocks and counts the prompt
computed without running it; its first step runs the first token, which samples the
second. Its first-token and last-token times are the prefill's, so that TPOT and the
second token's inter-token gap include the transfer, as a client sees them.

The KV moved is the prompt's, every layer, every KV head: the TP ranks of the prefill
replica each send their heads' share over their own link at once (lanes = the smaller
of the two pools' TP). vLLM's NIXL connector (vllm-project/vllm at 002a1057,
v1/nixl_connector.py) does no layer-wise overlap: wait_for_layer_load and
save_kv_layer are no-ops, and the decode side reads the blocks after the prefill
request finishes; the whole transfer is therefore exposed, after the prefill's step
(layers = 0, the default). A connector that sends each layer's KV as that layer finishes
(LMCache's layer-wise mode; Splitwise's per-layer transfer) is modelled with layers = the
model's layer count: the last prefill step's layers overlap the transfer, so it may start
(L-1)/L of that step before the prefill ends, and ends no sooner than the last layer's
share after it (KVTransfer.window)."""
from __future__ import annotations

from dataclasses import dataclass

from batchlab.core.model.links import LinkSpec
from batchlab.core.request import Request, Sequence


@dataclass(frozen=True)
class KVTransfer:
    """The price of moving one request's KV from a prefill to a decode replica."""
    link: LinkSpec
    bytes_per_token: int  # KV of one token over all layers and heads (ModelSpec.kv_bytes_per_token)
    lanes: int = 1  # links used at once: min(prefill TP, decode TP)
    layers: int = 0  # 0: sent whole after the prefill; L: each of L layers as it finishes

    def nbytes(self, tokens: int) -> int:
        return tokens * self.bytes_per_token

    def seconds(self, tokens: int) -> float:
        return self.link.transfer_seconds(self.nbytes(tokens), self.lanes)

    def window(self, tokens: int, finish: float, last_step_s: float) -> tuple[float, float]:
        """(earliest start, earliest end) of the transfer of a prompt whose prefill ended
        at `finish` with a last step of last_step_s: whole after it, or layer by layer."""
        whole = self.seconds(tokens)
        if not self.layers:
            return finish, finish + whole
        per_layer = (whole - self.link.latency_s) / self.layers
        return finish - last_step_s * (self.layers - 1) / self.layers, finish + self.link.latency_s + per_layer


def prefill_request(request: Request) -> Request:
    """What the prefill pool serves: the prompt and its first token only."""
    return request if request.output_len == 1 else request.replace(output_len=1)


def decode_sequence(prefilled: Sequence, request: Request) -> Sequence:
    """The decode replica's sequence for `request`, whose prompt `prefilled` (finished on
    the prefill replica, its first token sampled) computed: the prompt's KV elsewhere,
    one token generated, its token times and counts carried over."""
    seq = Sequence(request)
    seq.num_generated = prefilled.num_generated
    seq.kv_elsewhere = request.prompt_len
    # first_scheduled is left unset: the decode replica stamps its own admission (its
    # queue's), and whoever records the request's row puts the prefill's back.
    seq.first_token = seq.last_token = prefilled.first_token
    seq.preemptions = prefilled.preemptions
    seq.cached_tokens = prefilled.cached_tokens
    return seq
