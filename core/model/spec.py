"""A decoder's shape, in the terms a price needs: the dense fields every model has, and
the mixture-of-experts, latent-attention (MLA), sliding-window and quantisation fields
the models served today add (each 0 / empty where a model has none, so a dense Llama
is priced exactly as before they existed). core/model/config_json.py reads one from any
Hugging Face config.json; a per-GPU shape (core/cost/operator_shapes.py) reads these fields.

Parameter counts are integers and exact up to what they leave out on purpose: biases,
the MoE router's bias and the per-head sink logits (all far below 0.1% of a layer)."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, model_validator

from batchlab.core.checks import Count, Tokens

# The largest model shapes batchlab simulates, each far beyond any model served today, so
# that a shape that cannot be (a config.json with 10^9 layers) is refused naming the bound
# before per-layer tables are built (they held gigabytes) or sizes overflow: layers (the
# deepest today: 126, Llama-3.1-405B), routed experts (384, Kimi K2), vocabulary (262,144,
# Gemma 3), widths (hidden, MLP, head: 53,248 is Llama-3.1-405B's MLP) and heads (128).
MAX_LAYERS = 10_000
MAX_EXPERTS = 100_000
MAX_VOCAB = 100_000_000
MAX_WIDTH = 2**20
MAX_HEADS = 2**16

# Declared weight quantisations batchlab prices ("" = the weights are dtype_bytes wide).
QUANTIZATIONS = ("", "fp8", "mxfp4")
# mxfp4: 4-bit elements plus one 8-bit scale per block of 32.
MXFP4_BYTES = (4 + 8 / 32) / 8


class ModelSpec(BaseModel):
    """A decoder-only transformer (RMSNorm, RoPE, GQA or MLA attention, gated MLP or
    mixture of gated experts)."""
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    num_layers: Count = Field(le=MAX_LAYERS)
    hidden_size: Count = Field(le=MAX_WIDTH)
    num_heads: Count = Field(le=MAX_HEADS)
    num_kv_heads: Count = Field(le=MAX_HEADS)
    head_dim: Count = Field(le=MAX_WIDTH, description="query/key head width (MLA: nope + rope part)")
    intermediate_size: Count = Field(le=MAX_WIDTH, description="the dense MLP's width (dense layers of a MoE)")
    vocab_size: Count = Field(le=MAX_VOCAB)
    max_context: Tokens | None = Field(
        None, description="max_position_embeddings: longest prompt + output (None: unknown)")
    tied_embeddings: bool = False
    dtype_bytes: Count = Field(2, le=8, description="bytes per weight (and KV element, unless kv_dtype_bytes)")
    kv_dtype_bytes: Count | None = Field(None, le=8, description="bytes per KV element; None: dtype_bytes")
    architecture: str = Field("llama", description="the config's model_type")

    # Mixture of experts: moe_layers of the num_layers have routed experts instead of
    # the dense MLP; each token goes to experts_per_token of num_experts, and to every
    # shared expert (their widths summed in shared_expert_intermediate_size).
    num_experts: NonNegativeInt = Field(0, le=MAX_EXPERTS)
    experts_per_token: NonNegativeInt = Field(0, le=MAX_EXPERTS)
    expert_intermediate_size: NonNegativeInt = Field(0, le=MAX_WIDTH)
    shared_expert_intermediate_size: NonNegativeInt = Field(0, le=MAX_WIDTH * 64)  # several shared experts summed
    moe_layers: NonNegativeInt = Field(0, le=MAX_LAYERS)
    expert_weight_bytes: NonNegativeFloat = Field(
        0.0, description="bytes per routed-expert weight where the config quantises the experts "
        "apart (mxfp4); 0: dtype_bytes")

    # Multi-head latent attention (DeepSeek-V2/V3): KV is one latent of kv_lora_rank plus
    # a shared rope key of qk_rope_head_dim per token and layer.
    kv_lora_rank: NonNegativeInt = Field(0, le=MAX_WIDTH)
    q_lora_rank: NonNegativeInt = Field(0, le=MAX_WIDTH)
    qk_rope_head_dim: NonNegativeInt = Field(0, le=MAX_WIDTH)
    v_head_dim: NonNegativeInt = Field(0, le=MAX_WIDTH, description="value head width; 0: head_dim")

    # Sliding-window / chunked local attention: per layer, the most tokens it attends
    # (0: all of them); empty: every layer attends everything.
    layer_windows: tuple[NonNegativeInt, ...] = ()
    attention_sinks: bool = False
    quantization: str = Field("", description="declared weight quantisation: '' | fp8 | mxfp4")

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.num_experts and not 1 <= self.experts_per_token <= self.num_experts:
            raise ValueError(f"experts_per_token {self.experts_per_token} is not between 1 and "
                             f"the {self.num_experts} experts")
        if self.moe_layers > self.num_layers:
            raise ValueError(f"moe_layers {self.moe_layers} exceeds num_layers {self.num_layers}")
        if self.layer_windows and len(self.layer_windows) != self.num_layers:
            raise ValueError(f"layer_windows has {len(self.layer_windows)} entries for "
                             f"{self.num_layers} layers")
        if self.quantization not in QUANTIZATIONS:
            raise ValueError(f"quantization {self.quantization!r}: expected one of fp8, mxfp4")
        return self

    # -- what kind of model -------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0 and self.moe_layers > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def windowed_layers(self) -> int:
        return sum(1 for w in self.layer_windows if w)

    @property
    def full_layers(self) -> int:
        return self.num_layers - self.windowed_layers

    @property
    def window(self) -> int:
        """The (largest) window of the windowed layers; 0 when none has one."""
        return max(self.layer_windows, default=0)

    # -- parameters -----------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        """One layer's attention projections."""
        h, nh, hd = self.hidden_size, self.num_heads, self.head_dim
        if self.is_mla:
            v = self.v_head_dim or hd
            q = (h * self.q_lora_rank + self.q_lora_rank * nh * hd) if self.q_lora_rank else h * nh * hd
            kv_a = h * (self.kv_lora_rank + self.qk_rope_head_dim)
            kv_b = self.kv_lora_rank * nh * (hd - self.qk_rope_head_dim + v)
            return q + kv_a + kv_b + nh * v * h
        return h * nh * hd * 2 + h * self.num_kv_heads * hd * 2  # q, o, k, v

    @property
    def layer_params(self) -> int:
        """One dense layer: attention, the gated MLP (three matrices) and two norms."""
        return self.attention_params + 3 * self.hidden_size * self.intermediate_size + 2 * self.hidden_size

    @property
    def expert_params(self) -> int:
        """One routed expert (gate, up, down)."""
        return 3 * self.hidden_size * self.expert_intermediate_size

    @property
    def moe_shared_params(self) -> int:
        """What every token of a MoE layer reads besides its routed experts: attention,
        norms, the shared experts and the router."""
        h = self.hidden_size
        return (self.attention_params + 2 * h + 3 * h * self.shared_expert_intermediate_size
                + h * self.num_experts)

    @property
    def dense_layers(self) -> int:
        return self.num_layers - (self.moe_layers if self.is_moe else 0)

    @property
    def expert_params_total(self) -> int:
        """Every routed expert of every MoE layer."""
        return self.moe_layers * self.num_experts * self.expert_params if self.is_moe else 0

    @property
    def _embed(self) -> int:
        return self.vocab_size * self.hidden_size

    @property
    def params(self) -> int:
        head = 0 if self.tied_embeddings else self._embed
        return self.non_expert_params + self.expert_params_total + self._embed + head

    @property
    def non_expert_params(self) -> int:
        """Decoder layers without their routed experts, and the final norm."""
        moe = self.moe_layers * self.moe_shared_params if self.is_moe else 0
        return self.dense_layers * self.layer_params + moe + self.hidden_size

    @property
    def params_read_per_step(self) -> int:
        """Weights a forward pass streams when every weight is touched: every layer (all
        experts) and the LM head; the embedding table is only gathered row by row
        (unless tied, when it is the LM head)."""
        return self.non_expert_params + self.expert_params_total + self._embed

    @property
    def active_params(self) -> int:
        """Weights one token multiplies through: its experts only, and the LM head."""
        routed = self.moe_layers * self.experts_per_token * self.expert_params if self.is_moe else 0
        return self.non_expert_params + routed + self._embed

    @property
    def expert_bytes_per_weight(self) -> float:
        return self.expert_weight_bytes or float(self.dtype_bytes)

    @property
    def weight_bytes(self) -> int:
        """Bytes of all the weights as stored (experts in their own quantisation)."""
        other = (self.params - self.expert_params_total) * self.dtype_bytes
        return int(other + self.expert_params_total * self.expert_bytes_per_weight)

    # -- KV cache and attention -----------------------------------------------------
    @property
    def kv_element_bytes(self) -> int:
        return self.kv_dtype_bytes or self.dtype_bytes

    @property
    def kv_bytes_per_token_layer(self) -> int:
        """One token's KV in one layer: K and V of each KV head; MLA: the latent and the
        rope key, no separate V."""
        if self.is_mla:
            return (self.kv_lora_rank + self.qk_rope_head_dim) * self.kv_element_bytes
        return 2 * self.num_kv_heads * self.head_dim * self.kv_element_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """One token's KV over all layers, windowed ones included (what a layer stores
        while the token is inside its window)."""
        return self.num_layers * self.kv_bytes_per_token_layer

    @property
    def activation_bytes(self) -> int:
        """Bytes per activation element (what a TP all-reduce moves): fp8 weights still
        compute and exchange activations in 16 bits."""
        return max(self.dtype_bytes, 2)

    @property
    def flops_per_token(self) -> int:
        """Matmul FLOPs of one token through all linear layers and the LM head (its
        experts only, for a MoE)."""
        return 2 * (self.active_params if self.is_moe else self.params_read_per_step)

    @property
    def attention_flops_per_pair_layer(self) -> int:
        """QK^T and PV for one (query, key) pair in one layer, all heads. MLA with the
        projections absorbed (as engines decode it): scores and values in the latent
        space, kv_lora_rank + rope wide for QK and kv_lora_rank for PV."""
        if self.is_mla:
            return 2 * self.num_heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim)
        return 4 * self.num_heads * self.head_dim

    @property
    def prefill_attention_flops_per_pair_layer(self) -> int:
        """The same for a prefill chunk's pairs: MLA prefills with the projections applied
        (queries and keys head_dim wide, values v_head_dim), as engines run it."""
        if self.is_mla:
            return 2 * self.num_heads * (self.head_dim + (self.v_head_dim or self.head_dim))
        return self.attention_flops_per_pair_layer

    @property
    def attention_flops_per_pair(self) -> int:
        """attention_flops_per_pair_layer over all layers (as if none were windowed)."""
        return self.num_layers * self.attention_flops_per_pair_layer
