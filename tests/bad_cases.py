"""The corpus of broken inputs (tests/test_bad_input.py): (id, argv, what the one-line
error must name). Files live in tests/data/bad/<kind>/; inputs too large to keep in the
repository are written by generate() into {tmp}."""
from __future__ import annotations

from pathlib import Path

BAD = Path(__file__).parent / "data" / "bad"
BIG = "x" * 2_000_000  # a 2 MB field: an error must not repeat it


def generate(tmp: Path) -> None:
    (tmp / "huge_field.jsonl").write_text(
        '{"timestamp": 0, "input_length": "%s", "output_length": 1}\n' % BIG)
    (tmp / "long_line.csv").write_text("arrival_s,prompt_len,output_len\n0,1," + "9" * 2_000_000)
    (tmp / "huge_source.toml").write_text(f'[workload]\nsource = "{BIG}"\n')
    (tmp / "huge_policy.toml").write_text(f'[scheduler]\npolicy = "{BIG}"\n')


def _sim(path: str, *more: str) -> list[str]:
    return ["simulate", "--workload", "{bad}/" + path, *more]


def _toml(name: str, command: str = "simulate") -> list[str]:
    return [command, "--config", "{bad}/toml/" + name]


N = ["--num-requests", "20"]
TINY = ["--model", "batchlab-tiny", "--num-requests", "4", "--no-progress"]
VAL = ["--num-requests", "4", "--no-progress"]  # validate: the profile's own model

# validate cases whose message comes once the model is loaded (the backend extra)
SERVES = {"validate-kv-memory-1KiB"}

CASES: list[tuple[str, list[str], str]] = [
    # -- Azure CSV -------------------------------------------------------------------------
    ("azure-epoch-seconds", _sim("azure/epoch_seconds.csv"), "epoch_seconds.csv:2: TIMESTAMP"),
    ("azure-epoch-ms", ["workload", "stats", "{bad}/azure/epoch_ms.csv"], "epoch_ms.csv:2: TIMESTAMP"),
    ("azure-tokens-1e30", _sim("azure/tokens_1e30.csv"), "tokens_1e30.csv:3: ContextTokens"),
    ("azure-tokens-2p63", ["workload", "stats", "{bad}/azure/tokens_2p63.csv"],
     "tokens_2p63.csv:2: ContextTokens"),
    ("azure-output-inf", _sim("azure/output_inf.csv"), "output_inf.csv:2: GeneratedTokens"),
    ("azure-output-nan", ["workload", "convert", "{bad}/azure/output_nan.csv"],
     "output_nan.csv:2: GeneratedTokens"),
    ("azure-year-1000", _sim("azure/year_1000.csv"), "year_1000.csv:2: TIMESTAMP"),
    ("azure-span-500-years", _sim("azure/span_500y.csv"), "span_500y.csv:3: TIMESTAMP"),
    # -- Mooncake JSONL --------------------------------------------------------------------
    ("mooncake-bool-length", _sim("mooncake/bool_length.jsonl"), "bool_length.jsonl:1: input_length"),
    ("mooncake-bool-timestamp", ["workload", "stats", "{bad}/mooncake/bool_timestamp.jsonl"],
     "bool_timestamp.jsonl:1: timestamp"),
    ("mooncake-huge-timestamp", _sim("mooncake/huge_timestamp.jsonl"),
     "huge_timestamp.jsonl:1: timestamp"),
    ("mooncake-tokens-1e30", _sim("mooncake/tokens_1e30.jsonl"), "tokens_1e30.jsonl:1: input_length"),
    ("mooncake-hash-beyond-int64", _sim("mooncake/hash_beyond_int64.jsonl"),
     "hash_beyond_int64.jsonl:1: hash_ids"),
    ("mooncake-hash-bool", _sim("mooncake/hash_bool.jsonl"), "hash_bool.jsonl:1: hash_ids"),
    ("mooncake-infinity-timestamp", ["workload", "convert", "{bad}/mooncake/infinity_timestamp.jsonl"],
     "infinity_timestamp.jsonl:1: timestamp"),
    ("mooncake-nan-length", _sim("mooncake/nan_length.jsonl"), "nan_length.jsonl:1: input_length"),
    ("mooncake-output-int64-max", _sim("mooncake/output_int64_max.jsonl"),
     "output_int64_max.jsonl:1: output_length"),
    ("mooncake-huge-field", ["simulate", "--workload", "{tmp}/huge_field.jsonl"],
     "huge_field.jsonl:1: input_length"),
    # -- length CSV ------------------------------------------------------------------------
    ("lengths-decode-1e30", _sim("lengths/decode_1e30.csv"), "decode_1e30.csv:2: num_decode_tokens"),
    ("lengths-prefill-int64-max", ["workload", "stats", "{bad}/lengths/prefill_int64_max.csv"],
     "prefill_int64_max.csv:2: num_prefill_tokens"),
    ("lengths-prefill-inf", _sim("lengths/prefill_inf.csv"), "prefill_inf.csv:2: num_prefill_tokens"),
    ("lengths-decode-true", _sim("lengths/decode_true.csv"), "decode_true.csv:2: num_decode_tokens"),
    ("lengths-as-length-file", ["simulate", "--length-file", "{bad}/lengths/decode_1e30.csv", *N],
     "decode_1e30.csv:2: num_decode_tokens"),
    # -- batchlab CSV / JSONL --------------------------------------------------------------
    ("batchlab-priority-1e30", _sim("batchlab/priority_1e30.csv"), "priority_1e30.csv:2: priority"),
    ("batchlab-priority-below-int64", _sim("batchlab/priority_below_int64.csv"),
     "priority_below_int64.csv:2: priority"),
    ("batchlab-arrival-1e20", _sim("batchlab/arrival_1e20.csv"), "arrival_1e20.csv:2: arrival_s"),
    ("batchlab-arrival-1e9", ["workload", "stats", "{bad}/batchlab/arrival_1e9.csv"],
     "arrival_1e9.csv:3: arrival_s"),
    ("batchlab-priority-bool", _sim("batchlab/priority_bool.jsonl"), "priority_bool.jsonl:1: priority"),
    ("batchlab-arrival-bool", _sim("batchlab/arrival_bool.jsonl"), "arrival_bool.jsonl:1: arrival_s"),
    ("batchlab-output-bool", ["workload", "convert", "{bad}/batchlab/output_bool.jsonl"],
     "output_bool.jsonl:1: output_len"),
    ("batchlab-output-1e300", _sim("batchlab/output_1e300.jsonl"), "output_1e300.jsonl:1: output_len"),
    ("batchlab-priority-1e30-jsonl", _sim("batchlab/priority_1e30.jsonl"),
     "priority_1e30.jsonl:1: priority"),
    ("trace-long-line", ["simulate", "--workload", "{tmp}/long_line.csv"], "long_line.csv:2:"),
    ("trace-dev-zero", ["simulate", "--workload", "/dev/zero"], "/dev/zero"),
    ("trace-dev-zero-stats", ["workload", "stats", "/dev/zero"], "/dev/zero"),
    # -- TOML ------------------------------------------------------------------------------
    ("toml-step-overhead-inf", _toml("step_overhead_inf.toml"), "hardware.step_overhead_s"),
    ("toml-step-overhead-nan", _toml("step_overhead_nan.toml"), "hardware.step_overhead_s"),
    ("toml-max-batch-delay-inf", _toml("max_batch_delay_inf.toml"), "scheduler.max_batch_delay_s"),
    ("toml-mem-efficiency-nan", _toml("mem_efficiency_nan.toml"), "hardware.mem_efficiency"),
    ("toml-rate-1e-300", _toml("rate_1e-300.toml"), "workload.rate"),
    ("toml-rate-1e-320", _toml("rate_1e-320.toml"), "workload.rate"),
    ("toml-rate-neg-inf", _toml("rate_neg_inf.toml"), "workload.rate"),
    ("toml-rate-span-too-long", _toml("rate_span_too_long.toml"), "rate"),
    ("toml-lognormal-mean-1e300", _toml("lognormal_mean_1e300.toml"), "workload.output.mean"),
    ("toml-lognormal-sigma-huge", _toml("lognormal_sigma_huge.toml"), "workload.output.sigma"),
    ("toml-mixture-no-components", _toml("mixture_no_components.toml"), "workload.prompt.components"),
    ("toml-mixture-inf-weight", _toml("mixture_inf_weight.toml"), "weight"),
    ("toml-mixture-weights-overflow", _toml("mixture_weights_overflow.toml"), "weights"),
    ("toml-uniform-high-int64-max", _toml("uniform_high_int64_max.toml"), "workload.prompt.high"),
    ("toml-fixed-value-bool", _toml("fixed_value_bool.toml"), "workload.prompt.value"),
    ("toml-seats-int64-max", _toml("seats_int64_max.toml"), "scheduler.max_num_seqs"),
    ("toml-kv-blocks-1e16", _toml("kv_blocks_1e16.toml"), "scheduler.num_kv_blocks"),
    ("toml-replicas-1e8", _toml("replicas_1e8.toml"), "replica"),
    ("toml-block-size-1e9", _toml("block_size_1e9.toml"), "block"),
    ("toml-num-requests-1e12", _toml("num_requests_1e12.toml"), "num_requests"),
    ("toml-simulate-device", _toml("simulate_device.toml"), "[model] device"),
    ("toml-simulate-threads", _toml("simulate_threads.toml"), "[model] threads"),
    ("toml-simulate-time-scale", _toml("simulate_time_scale.toml"), "[run] time_scale"),
    ("toml-simulate-temperature", _toml("simulate_temperature.toml"), "[run] temperature"),
    ("toml-simulate-kv-memory", _toml("simulate_kv_memory.toml"), "[model] kv_memory"),
    ("toml-profile-with-efficiency", _toml("profile_with_efficiency.toml"), "mem_efficiency"),
    ("toml-profile-with-dtype", _toml("profile_with_dtype.toml"), "dtype"),
    ("toml-think-time-inf", _toml("think_time_inf.toml"), "workload.think_time_s"),
    ("toml-window-start-1e300", _toml("window_start_1e300.toml"), "workload.window_start_s"),
    ("toml-rate-scale-1e-300", _toml("rate_scale_1e-300.toml"), "rate_scale"),
    ("toml-length-scale-1e-300", _toml("length_scale_1e-300.toml"), "length_scale"),
    ("toml-slo-inf", _toml("slo_inf.toml"), "run.slo.ttft_ms"),
    ("toml-burstiness-subnormal", _toml("burstiness_subnormal.toml"), "workload.burstiness"),
    ("toml-tp-int64-max", _toml("tp_int64_max.toml"), "hardware.tensor_parallel"),
    ("toml-binary", _toml("binary.toml"), "binary.toml"),
    ("toml-binary-workload", ["workload", "stats", "--config", "{bad}/toml/binary.toml"], "binary.toml"),
    ("toml-huge-source", ["simulate", "--config", "{tmp}/huge_source.toml"], "source"),
    ("toml-huge-policy", ["simulate", "--config", "{tmp}/huge_policy.toml"], "policy"),
    ("toml-run-time-scale-nan", _toml("run_time_scale_nan.toml", "run"), "run.time_scale"),
    ("toml-run-kv-memory-unitless", _toml("run_kv_memory_unitless.toml", "run"), "kv_memory"),
    ("toml-run-kv-cache-dtype", _toml("run_kv_cache_dtype.toml", "run"), "kv_cache_dtype"),
    # -- profile JSON (simulate and validate read them) ------------------------------------
    ("profile-overhead-infinity", ["simulate", "--profile", "{bad}/profile/overhead_infinity.json", *N],
     "cost.overhead_s"),
    ("profile-small-rows-nan", ["simulate", "--profile", "{bad}/profile/small_rows_nan.json", *N],
     "cost.small_rows.1"),
    ("profile-kv-blocks-1e30", ["simulate", "--profile", "{bad}/profile/num_kv_blocks_1e30.json", *N],
     "num_kv_blocks"),
    ("profile-block-size-true", ["simulate", "--profile", "{bad}/profile/block_size_true.json", *N],
     "block_size"),
    ("profile-layers-1e30", ["simulate", "--profile", "{bad}/profile/num_layers_1e30.json", *N],
     "model.num_layers"),
    ("profile-hidden-true", ["validate", "--profile", "{bad}/profile/hidden_size_true.json", *VAL],
     "model.hidden_size"),
    ("profile-cost-string", ["validate", "--profile", "{bad}/profile/cost_string.json", *VAL],
     "cost.per_seq_s"),
    ("profile-s-per-flop-negative", ["simulate", "--profile", "{bad}/profile/s_per_flop_negative.json", *N],
     "cost.s_per_flop"),
    ("profile-dtype-bytes-huge", ["simulate", "--profile", "{bad}/profile/dtype_bytes_huge.json", *N],
     "model.dtype_bytes"),
    ("profile-binary", ["simulate", "--profile", "{bad}/profile/binary.json", *N], "binary.json"),
    # -- model configs (simulate, capacity: any config.json), GPUs and layouts -------------
    ("sim-model-layers-true", ["simulate", *N, "--model", "{bad}/models/layers_true"], "num_hidden_layers"),
    ("sim-model-context-nan", ["simulate", *N, "--model", "{bad}/models/context_nan"],
     "max_position_embeddings"),
    ("sim-model-hidden-1e30", ["simulate", *N, "--model", "{bad}/models/hidden_1e30"], "hidden_size"),
    ("sim-model-binary", ["simulate", *N, "--model", "{bad}/models/config_binary"], "config.json"),
    ("sim-moe-topk-above", ["simulate", *N, "--model", "{bad}/models/moe_topk_above"], "num_experts_per_tok"),
    ("sim-unknown-arch", ["simulate", *N, "--model", "{bad}/models/unknown_arch"], "model_type"),
    ("sim-quant-awq", ["simulate", *N, "--model", "{bad}/models/quant_awq"], "quant_method"),
    ("capacity-moe-topk-above", ["capacity", "max-rate", *N, "--slo-tpot-ms", "100", "--model",
                                 "{bad}/models/moe_topk_above"], "num_experts_per_tok"),
    ("layout-ep-not-tp", ["simulate", *N, "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--tp", "4",
                          "--ep", "2"], "expert_parallel=2"),
    ("layout-pp-above-layers", ["simulate", *N, "--pp", "64"], "pipeline_parallel=64"),
    ("fp8-on-ampere", ["simulate", *N, "--model", "deepseek-v2-lite", "--dtype", "fp8"], "fp8"),
    ("toml-hardware-incomplete", _toml("hardware_incomplete.toml"), "mem_bandwidth_gbs"),
    ("toml-knob-negative", _toml("knob_negative.toml"), "[hardware] knobs: GPU profile constant compute_efficiency"),
    # -- model directories (run, calibrate) ------------------------------------------------
    ("model-file", ["run", *TINY, "--model", "{bad}/models/not_a_dir.safetensors"], "is a file"),
    ("model-file-calibrate", ["calibrate", "--model", "{bad}/models/not_a_dir.safetensors"], "is a file"),
    ("model-layers-true", ["run", *TINY, "--model", "{bad}/models/layers_true"], "num_hidden_layers"),
    ("model-hidden-1e30", ["run", *TINY, "--model", "{bad}/models/hidden_1e30"], "hidden_size"),
    ("model-heads-zero", ["calibrate", "--model", "{bad}/models/heads_zero"], "num_attention_heads"),
    ("model-vocab-negative", ["run", *TINY, "--model", "{bad}/models/vocab_negative"], "vocab_size"),
    ("model-context-nan", ["run", *TINY, "--model", "{bad}/models/context_nan"],
     "max_position_embeddings"),
    ("model-layers-string", ["run", *TINY, "--model", "{bad}/models/layers_string"], "num_hidden_layers"),
    ("model-huge", ["run", *TINY, "--model", "{bad}/models/huge_model"], "config.json"),
    ("model-config-binary", ["run", *TINY, "--model", "{bad}/models/config_binary"], "config.json"),
    # -- flags: simulate -------------------------------------------------------------------
    ("sim-rate-1e-320", ["simulate", *N, "--rate", "1e-320"], "workload.rate"),
    ("sim-rate-1e-300", ["simulate", *N, "--rate", "1e-300"], "workload.rate"),
    ("sim-rate-nan", ["simulate", *N, "--rate", "nan"], "workload.rate"),
    ("sim-seats-1e30", ["simulate", *N, "--max-num-seqs", str(10**30)], "max_num_seqs"),
    ("sim-kv-blocks-1e16", ["simulate", *N, "--num-kv-blocks", str(10**16)], "num_kv_blocks"),
    ("sim-replicas-1e8", ["simulate", *N, "--replicas", str(10**8)], "--replicas"),
    ("sim-num-requests-1e12", ["simulate", "--num-requests", str(10**12)], "num_requests"),
    ("sim-block-size-1e9", ["simulate", *N, "--block-size", str(10**9)], "block"),
    ("sim-block-size-1e10", ["simulate", *N, "--block-size", str(10**10)], "block_size"),
    # valid as a token count, but a decode group kept a counter per position of a block:
    # 2**24 held 18 GB and minutes in the config property test
    ("sim-block-size-2-24", ["simulate", *N, "--num-kv-blocks", "4000", "--block-size", str(2**24)],
     "block_size"),
    ("sim-batch-delay-inf", ["simulate", *N, "--policy", "static", "--max-batch-delay", "inf"],
     "max_batch_delay_s"),
    ("sim-batch-delay-nan", ["simulate", *N, "--policy", "static", "--max-batch-delay", "nan"],
     "max_batch_delay_s"),
    ("sim-slo-inf", ["simulate", *N, "--slo-ttft-ms", "inf"], "slo.ttft_ms"),
    ("sim-slo-nan", ["simulate", *N, "--slo-tpot-ms", "nan"], "slo.tpot_ms"),
    ("sim-jitter-inf", ["simulate", *N, "--jitter", "inf"], "jitter_s"),
    ("sim-window-start-inf", ["simulate", *N, "--window-start", "inf"], "window_start_s"),
    ("sim-think-time-inf", ["simulate", *N, "--max-concurrency", "2", "--think-time", "inf"],
     "think_time_s"),
    ("sim-concurrency-1e30", ["simulate", *N, "--max-concurrency", str(10**30)], "max_concurrency"),
    ("sim-rate-scale-1e-300", ["simulate", *N, "--rate-scale", "1e-300"], "--rate-scale"),
    ("sim-length-scale-1e-300", ["simulate", *N, "--length-scale", "1e-300"], "length_scale"),
    ("sim-length-scale-inf", ["simulate", *N, "--length-scale", "inf"], "length_scale"),
    ("sim-seed-1e30", ["simulate", *N, "--seed", str(10**30)], "seed"),
    ("sim-max-model-len-1e30", ["simulate", *N, "--max-model-len", str(10**30)], "max_model_len"),
    ("sim-tp-1e30", ["simulate", *N, "--tp", str(10**30)], "tensor_parallel"),
    ("sim-burstiness-1e-320", ["simulate", *N, "--burstiness", "1e-320"], "burstiness"),
    ("sim-burstiness-inf", ["simulate", *N, "--burstiness", "inf"], "burstiness"),
    ("sim-max-prompt-len-1e30", ["simulate", *N, "--max-prompt-len", str(10**30)], "max_prompt_len"),
    ("sim-batched-tokens-1e30", ["simulate", *N, "--max-num-batched-tokens", str(10**30)],
     "max_num_batched_tokens"),
    ("sim-step-overhead-inf", ["simulate", *N, "--step-overhead", "inf"], "step_overhead_s"),
    ("sim-mem-efficiency-nan", ["simulate", *N, "--mem-efficiency", "nan"], "mem_efficiency"),
    ("sim-collective-latency-inf", ["simulate", *N, "--tp", "2", "--collective-latency-us", "inf"],
     "allreduce_latency_s"),
    ("sim-profile-step-overhead", ["simulate", *N, "--profile", "default", "--step-overhead", "0.01"],
     "step_overhead_s"),
    # -- flags: workload stats / convert ---------------------------------------------------
    ("stats-rate-1e-320", ["workload", "stats", "chat", "--rate", "1e-320"], "workload.rate"),
    ("stats-num-requests-1e12", ["workload", "stats", "chat", "--num-requests", str(10**12)],
     "num_requests"),
    ("convert-jitter-nan", ["workload", "convert", "chat", *N, "--jitter", "nan"], "jitter_s"),
    ("convert-window-duration-inf", ["workload", "convert", "chat", *N, "--window-duration", "inf"],
     "window_duration_s"),
    # -- flags: run ------------------------------------------------------------------------
    ("run-kv-memory-1KiB", ["run", *TINY, "--kv-memory", "1KiB"], "--kv-memory 1KiB"),
    ("run-kv-memory-unitless", ["run", *TINY, "--kv-memory", "2.0"], "kv_memory"),
    ("run-kv-memory-1e30GiB", ["run", *TINY, "--kv-memory", "1e30GiB"], "kv_memory"),
    ("run-kv-memory-nan", ["run", *TINY, "--kv-memory", "nan"], "kv_memory"),
    ("run-kv-memory-more-than-free", ["run", *TINY, "--kv-memory", "1000000TiB"], "kv-memory"),
    ("run-kv-blocks-1e15", ["run", *TINY, "--num-kv-blocks", str(10**15)], "--num-kv-blocks"),
    ("run-threads-1e30", ["run", *TINY, "--threads", str(10**30)], "threads"),
    ("run-time-scale-inf", ["run", *TINY, "--time-scale", "inf"], "time_scale"),
    ("run-temperature-nan", ["run", *TINY, "--temperature", "nan"], "temperature"),
    # -- flags: calibrate ------------------------------------------------------------------
    ("calibrate-threads-1e30", ["calibrate", "--threads", str(10**30)], "--threads"),
    ("calibrate-block-size-1e10", ["calibrate", "--block-size", str(10**10)], "--block-size"),
    ("calibrate-kv-memory-1KiB", ["calibrate", "--model", "batchlab-tiny", "--kv-memory", "1KiB"],
     "--kv-memory"),
    ("calibrate-kv-memory-unitless", ["calibrate", "--kv-memory", "2.0"], "--kv-memory"),
    # -- flags: validate -------------------------------------------------------------------
    ("validate-kv-memory-1KiB", ["validate", "--profile", "default", *VAL, "--kv-memory", "1KiB"],
     "--kv-memory 1KiB"),
    ("validate-rate-nan", ["validate", "--profile", "default", *VAL, "--rate", "nan"], "workload.rate"),
    # -- flags: experiment -----------------------------------------------------------------
    ("experiment-unknown", ["experiment", "no-such-study"], "no-such-study"),
    # -- read one way, never two (issue 32) -------------------------------------------------
    ("batchlab-duplicate-column", _sim("batchlab/dup_column.csv"),
     "dup_column.csv:1: column 'prompt_len' appears twice in the header (columns 2 and 4)"),
    ("mooncake-duplicate-key", _sim("mooncake/dup_key.jsonl"),
     "dup_key.jsonl:2: key 'input_length' appears twice"),
    ("profile-duplicate-key", ["simulate", "--profile", "{bad}/profile/dup_key.json", *N],
     "dup_key.json: key 'version' appears twice"),
    ("from-run-duplicate-column", ["calibrate", "--from-run", "{bad}/runs/dup_column"],
     "dup_column (p0): steps.csv: column 'duration_s' appears twice"),
    ("from-run-negative-duration", ["calibrate", "--from-run", "{bad}/runs/negative_duration"],
     "negative_duration (p0): steps.csv row 5: duration_s is -0.002"),
    ("from-run-nan-duration", ["calibrate", "--from-run", "{bad}/runs/nan_duration"],
     "nan_duration (p0): steps.csv row 4: column duration_s is 'nan'"),
    ("from-run-inf-start", ["calibrate", "--from-run", "{bad}/runs/inf_start"],
     "inf_start (p0): steps.csv row 3: column start_s is 'inf'"),
    ("from-run-same-run-twice", ["calibrate", "--from-run", "{bad}/runs/once",
                                 "--from-run", "{bad}/runs/once"], "runs/once (p0): the same run as"),
    ("from-run-a-copy-of-a-run", ["calibrate", "--from-run", "{bad}/runs/once",
                                  "--from-run", "{bad}/runs/copy_of_once"],
     "copy_of_once (p0): the same run as"),
    # -- sizes refused up front, --out that is a file (issue 32) -----------------------------
    ("sweep-grid-1000x1000", ["sweep", "--config", "{bad}/toml/grid_1000x1000.toml"],
     "grid_1000x1000.toml: [grid] makes 1,000,000 points (1,000 x 1,000)"),
    ("sweep-seeds-5000", ["sweep", "--config", "{bad}/toml/sweep_seeds_5000.toml"],
     "sweep_seeds_5000.toml: [sweep] seeds = 5000, windows = 1: 5,000 runs"),
    ("simulate-seeds-1e6", ["simulate", "--seeds", "1000000", *N], "--seeds 1000000: 1,000,000 runs"),
    ("validate-repeats-1e6", ["validate", "--repeats", "1000000", *VAL], "--repeats 1000000: 1,000,000 runs"),
    ("serve-port-70000", ["serve", "--model", "batchlab-tiny", "--port", "70000"], "--port 70000: expected 0-65535"),
    ("serve-host-not-here", ["serve", "--model", "batchlab-tiny", "--host", "192.0.2.1", "--port", "0"],
     "--host/--port: 192.0.2.1:0 cannot be bound"),
    ("capacity-seeds-1e6", ["capacity", "max-rate", "--seeds", "1000000", "--slo-ttft-ms", "100"],
     "--seeds 1000000: 1,000,000 runs"),
    ("experiment-out-is-a-file", ["experiment", "batching", "--small", "--out", "{bad}/files/not_a_dir"],
     "--out {bad}/files/not_a_dir: is a file"),
    ("simulate-out-is-a-file", ["simulate", *N, "--out", "{bad}/files/not_a_dir"], "--out {bad}/files/not_a_dir: is a file"),
]


# The broken trace files of tests/data/broken (tests/test_workload_errors.py).
BROKEN = Path(__file__).parent / "data" / "broken"

# file, line, what the message must say
CORPUS = [
    ("empty.csv", 1, "empty file; expected a CSV header or a JSON line"),
    ("comments_only.jsonl", 1, "empty file"),
    ("header_only.csv", 2, "no requests after the header; expected at least one data row"),
    ("missing_column.csv", 1, "missing column 'GeneratedTokens'; expected azure"),
    ("unknown_header.csv", 1, "cannot tell the trace format from 'foo,bar,baz'; expected azure"),
    ("non_numeric.csv", 3, "ContextTokens is 'lots'; expected a whole number of tokens >= 1"),
    ("negative_tokens.csv", 4, "ContextTokens is '-20'; expected a whole number of tokens"),
    ("zero_output.csv", 3, "output_len is '0'; expected a whole number of tokens >= 1"),
    ("fractional_tokens.csv", 3, "prompt_len is '100.5'; expected a whole number"),
    ("nan_arrival.csv", 3, "arrival_s is 'nan'; expected a time in seconds >= 0"),
    ("short_row.csv", 3, "2 fields; expected 3 as in the header on line 1"),
    ("bad_datetime.csv", 3, "TIMESTAMP is '2023-11-16 25:99:00.0000000'; expected a date-time"),
    ("not_utf8.csv", 3, "not UTF-8 text"),
    ("truncated_json.jsonl", 3, "not valid JSON: Expecting ':' delimiter (column 56); "
                                "expected one JSON object per line"),
    ("missing_key.jsonl", 2, "missing key 'output_length'; expected keys timestamp, "
                             "input_length, output_length (mooncake format)"),
    ("not_object.jsonl", 2, "a JSON list; expected an object with keys"),
    ("negative_time.jsonl", 2, "timestamp is -500; expected a time in milliseconds >= 0"),
    ("bad_hash_ids.jsonl", 2, "hash_ids is '0 1'; expected a list of integer block hashes"),
    ("null_length.jsonl", 2, "input_length is null; expected a whole number of tokens"),
    ("float_hash_ids.jsonl", 2, "hash_ids is [1.5]; expected a list of integer block hashes"),
    ("hash_count_mismatch.jsonl", 2, "hash_ids has 2 hashes; expected 3, one per 512-token "
                                     "block of the 1100-token prompt (input_length)"),
    ("mixed_hash_block.csv", 3, "hash_block_size is 16; expected one block size for the "
                                "whole file (32 on earlier rows)"),
]
