"""The vLLM launch command of a deployment: what a planner runs once the answer is in.

The model is the Hugging Face checkpoint of the preset: Llama-family shapes map to their
instruct checkpoints (as served for chat), a shipped config.json preset to the repository
its config was taken from (core/model/presets/models/SOURCES.toml), a model given as a
folder to that folder. The quantisation flags follow the checkpoint: an unquantised one
served in fp8 is vLLM's online fp8 (`--quantization fp8`, the KV cache alike, as the
simulation assumed); an fp8 (DeepSeek-V3/R1) or mxfp4 (gpt-oss) checkpoint carries its
own quantization_config, which vLLM reads, so no flag is given (and another dtype needs
another checkpoint: space.why_not). A CPU KV tier (searched, or the config's [kv_tier]) is
vLLM's native offloading. Every flag printed is one of vLLM's `vllm serve` flags
(tests/data/vllm_serve_flags.txt names the version they were read from)."""
from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from batchlab.core.kv_tiers import TierConfig
from batchlab.core.model.presets import PRESET_CONFIGS, is_model_path, lookup_model
from batchlab.experiments.capacity.space import Deployment
from batchlab.experiments.capacity.tier_options import tier_gib

CHECKPOINTS = {
    "llama-2-7b": "meta-llama/Llama-2-7b-chat-hf", "llama-2-13b": "meta-llama/Llama-2-13b-chat-hf",
    "llama-2-70b": "meta-llama/Llama-2-70b-chat-hf", "llama-3-8b": "meta-llama/Meta-Llama-3-8B-Instruct",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.3", "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
}
NOT_ON_THE_HUB = "batchlab/embedded"  # SOURCES.toml's repo of the backend's embedded models
ONE_NODE = 8  # GPUs: --data-parallel-size alone (no multi-node flags) runs on one node


@functools.cache
def _sources() -> dict[str, str]:
    """Preset name -> the Hugging Face repository its config.json was taken from."""
    with open(PRESET_CONFIGS / "SOURCES.toml", "rb") as f:
        return {name: entry["repo"] for name, entry in tomllib.load(f).items()}


def checkpoint(model: str) -> str | None:
    """What `vllm serve` loads for a model preset (None: not on the Hugging Face Hub)."""
    if model in CHECKPOINTS:
        return CHECKPOINTS[model]
    repo = _sources().get(model)
    if repo is not None:
        return None if repo == NOT_ON_THE_HUB else repo
    if is_model_path(model):  # a folder holding config.json (and, to serve it, the weights)
        return str(Path(model))
    return None


def dtype_flags(dep: Deployment) -> list[str]:
    """The weights' and KV cache's flags for this checkpoint served in dep.dtype."""
    if lookup_model(dep.model).quantization:  # the checkpoint's own, read from its config
        return []
    if dep.dtype == "fp8":
        return ["--quantization fp8", "--kv-cache-dtype fp8"]
    return [f"--dtype {'bfloat16' if dep.dtype == 'bf16' else 'float16'}"]


def serve_flags(dep: Deployment, tier: TierConfig | None = None) -> list[str]:
    """tier: the deployment's KV tier as simulated (Option.cfg.kv_tier: a searched one, or
    the config's [kv_tier]; None: none)."""
    parts = [f"--tensor-parallel-size {dep.tp}"]
    if dep.pp > 1:
        parts.append(f"--pipeline-parallel-size {dep.pp}")
    if dep.ep > 1:
        parts.append("--enable-expert-parallel")
    return parts + [f"--max-num-seqs {dep.seats}", f"--max-num-batched-tokens {dep.budget}", *dtype_flags(dep),
                    *speculative_flags(dep), *offload_flags(dep, tier)]


def offload_flags(dep: Deployment, tier: TierConfig | None = None) -> list[str]:
    """vLLM's native CPU offloading for a CPU tier (searched, or the config's). vllm-project/vllm
    vllm/config/cache.py @ c1d86421174a87056edc90a41dc9942391509e84: CacheConfig.kv_offloading_size
    is "in GiB. When TP > 1, this is the total buffer size summed across all TP ranks", and
    kv_offloading_backend is 'native' (vLLM's CPU offloading) or 'lmcache'; arg_utils.py's cache
    group exposes both as --kv-offloading-size / --kv-offloading-backend. batchlab's tier is per
    GPU, so the size is it times the TP degree. A disk tier has no native flag (none printed)."""
    gib = tier_gib(dep.kv_tier)
    if gib is None and not dep.kv_tier and tier is not None and tier.kind == "cpu":
        gib = tier.capacity_gib  # the config's [kv_tier], searched as given
    if gib is None:
        return []
    return ["--kv-offloading-backend native", f"--kv-offloading-size {gib * dep.tp:g}"]


def speculative_flags(dep: Deployment) -> list[str]:
    """vLLM's --speculative-config for dep's speculation (its method names are batchlab's:
    vllm/config/speculative.py SpeculativeMethod); a draft model or EAGLE head is named by
    its checkpoint, which the deployment does not know."""
    if not dep.speculative or dep.speculative == "off":
        return []
    method, k = dep.speculative.split(":")
    draft = ', "model": "DRAFT_CHECKPOINT"' if method in ("draft_model", "eagle") else ""
    return [f"--speculative-config '{{\"method\": \"{method}\", \"num_speculative_tokens\": {k}{draft}}}'"]


def vllm_command(dep: Deployment, replicas: int, tier: TierConfig | None = None) -> str:
    """One replica's `vllm serve` line, and how many to run."""
    ckpt = checkpoint(dep.model)
    if ckpt is None:
        return f"# {dep.model} is batchlab's embedded model, not a Hugging Face checkpoint: no vLLM command"
    router = f"one {dep.router} router" if dep.router else "one router"
    times = f"  # x {replicas} replica(s), {replicas * dep.gpus_per_replica} GPU(s), behind {router}"
    return " ".join(["vllm serve", ckpt, *serve_flags(dep, tier)]) + times


def data_parallel_command(dep: Deployment, replicas: int, tier: TierConfig | None = None) -> str:
    """The replicas as one command (vLLM's --data-parallel-size: N engines behind its own
    balancer), where that is the same deployment: a dense model on one node. For a
    mixture of experts vLLM runs the expert layers as one group over all the data-parallel
    GPUs, another deployment than N independent replicas: '' then, as for one replica."""
    ckpt = checkpoint(dep.model)
    gpus = replicas * dep.gpus_per_replica
    if ckpt is None or replicas < 2 or lookup_model(dep.model).is_moe or gpus > ONE_NODE:
        return ""
    return (" ".join(["vllm serve", ckpt, *serve_flags(dep, tier), f"--data-parallel-size {replicas}"])
            + f"  # the {replicas} replicas in one command, on one node of {gpus} GPUs")
