"""The vLLM launch command of a deployment: what a planner runs once the answer is in.
A model preset maps to the Hugging Face checkpoint of the same shape (instruct
variants, as served for chat); fp8 weights are vLLM's online fp8 quantization, and the
KV cache follows the weights' dtype as the simulation assumed."""
from __future__ import annotations

from batchlab.experiments.capacity.space import Deployment

CHECKPOINTS = {
    "llama-2-7b": "meta-llama/Llama-2-7b-chat-hf", "llama-2-13b": "meta-llama/Llama-2-13b-chat-hf",
    "llama-2-70b": "meta-llama/Llama-2-70b-chat-hf", "llama-3-8b": "meta-llama/Meta-Llama-3-8B-Instruct",
    "llama-3-70b": "meta-llama/Meta-Llama-3-70B-Instruct",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B-Instruct", "llama-3.1-70b": "meta-llama/Llama-3.1-70B-Instruct",
    "mistral-7b": "mistralai/Mistral-7B-Instruct-v0.3", "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B-Instruct",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B-Instruct",
}


def vllm_command(dep: Deployment, replicas: int) -> str:
    """One replica's `vllm serve` line, and how many to run."""
    parts = ["vllm serve", CHECKPOINTS.get(dep.model, dep.model), f"--tensor-parallel-size {dep.tp}"]
    if dep.pp > 1:
        parts.append(f"--pipeline-parallel-size {dep.pp}")
    if dep.ep > 1:
        parts.append("--enable-expert-parallel")
    parts += [f"--max-num-seqs {dep.seats}", f"--max-num-batched-tokens {dep.budget}"]
    if dep.dtype == "fp8":
        parts += ["--quantization fp8", "--kv-cache-dtype fp8"]
    else:
        parts.append(f"--dtype {'bfloat16' if dep.dtype == 'bf16' else 'float16'}")
    times = f"  # x {replicas} replica(s), {replicas * dep.gpus_per_replica} GPU(s), behind one router"
    return " ".join(parts) + times
