"""The hardware catalogue and a GPU declared in a config: every entry has its source and
the figures a price needs; a [hardware] table with figures works wherever a preset does;
layouts are config fields and options, with one-line errors."""
from __future__ import annotations

import json
import tomllib

import pytest

from tests.helpers import cli, one_line_error
from batchlab.core.model.hardware import CATALOGUE, HARDWARE, MIB

ASKED = ("a100-40gb", "a100-80gb", "h100-sxm", "h100-pcie", "h200", "h20", "b200", "mi300x", "mi325x",
         "l40s", "l4", "a10g", "rtx-4090", "rtx-pro-6000", "a40")


def test_the_catalogue_holds_every_asked_gpu_with_its_source():
    entries = tomllib.loads(CATALOGUE.read_text())
    assert set(ASKED) <= set(HARDWARE) == set(entries)
    for name, hw in HARDWARE.items():
        assert hw.source and hw.interconnect and hw.interconnect_bandwidth > 0, name
        assert hw.peak_flops_fp8 == 0 or hw.peak_flops_fp8 >= hw.peak_flops, name
        assert hw.peak_flops_fp4 == 0 or hw.peak_flops_fp4 >= hw.peak_flops_fp8 > 0, name
    # Ampere has no fp8 tensor cores; Blackwell has fp4.
    assert not HARDWARE["a100-80gb"].peak_flops_fp8 and not HARDWARE["a40"].peak_flops_fp8
    assert HARDWARE["b200"].peak_flops_fp4 and HARDWARE["rtx-pro-6000"].peak_flops_fp4


def test_the_four_original_presets_keep_their_figures():
    assert HARDWARE["a100-80gb"].memory_bytes == 81_920 * MIB
    assert HARDWARE["h100-sxm"].mem_bandwidth == 3.35e12 and HARDWARE["h100-sxm"].peak_flops_fp8 == 1979e12
    assert HARDWARE["h200"].memory_bytes == 143_771 * MIB
    assert HARDWARE["l4"].interconnect_bandwidth == 32e9


def _simulate(tmp_path, hardware: dict, *flags: str) -> tuple[int, dict, str]:
    lines = [f"{k} = {json.dumps(v)}" for k, v in hardware.items()]
    (tmp_path / "exp.toml").write_text("[hardware]\n" + "\n".join(lines) + "\n")
    code, out, err = cli(["simulate", "--config", str(tmp_path / "exp.toml"), "--num-requests", "30",
                          "--format", "json", *flags])
    return code, (json.loads(out) if code == 0 else {}), err


def test_a_gpu_declared_in_toml_prices_as_the_preset_with_the_same_figures(tmp_path):
    h = HARDWARE["h100-sxm"]
    figures = {"name": "my-h100", "memory_mib": 81_559, "mem_bandwidth_gbs": 3350, "bf16_tflops": 989,
               "fp8_tflops": 1979, "interconnect": "NVLink 4", "interconnect_gbs": 450}
    code, mine, err = _simulate(tmp_path, figures)
    assert code == 0, err
    code, preset, err = _simulate(tmp_path, {"name": h.name})
    assert code == 0, err
    assert mine == preset
    # Faster memory: a faster answer.
    code, faster, err = _simulate(tmp_path, {**figures, "mem_bandwidth_gbs": 8000})
    assert code == 0, err
    p = next(iter(faster))
    assert faster[p]["median_tpot_ms"] < preset[p]["median_tpot_ms"]


def test_figures_given_with_a_preset_name_replace_its_own(tmp_path):
    code, base, _ = _simulate(tmp_path, {"name": "l4"})
    code2, tweaked, err = _simulate(tmp_path, {"name": "l4", "mem_bandwidth_gbs": 600})
    assert code == code2 == 0, err
    p = next(iter(base))
    assert tweaked[p]["median_tpot_ms"] < base[p]["median_tpot_ms"]


@pytest.mark.parametrize("hardware, words", [
    ({"name": "my-gpu", "memory_gib": 48}, "mem_bandwidth_gbs"),
    ({"name": "nowhere"}, "unknown hardware preset"),
    ({"name": "x", "memory_gib": 48, "mem_bandwidth_gbs": 900, "bf16_tflops": -3}, "bf16_tflops"),
    ({"name": "x", "memory_gib": 48, "memory_mib": 100, "mem_bandwidth_gbs": 9, "bf16_tflops": 9}, "memory_mib"),
])
def test_an_incomplete_gpu_is_one_line_naming_the_field(hardware, words, tmp_path):
    code, _, err = _simulate(tmp_path, hardware)
    one_line_error(code, err, words)


def test_fp8_weights_on_a_gpu_without_fp8_is_one_line(tmp_path):
    code, _, err = _simulate(tmp_path, {"name": "a100-80gb"}, "--model", "deepseek-v2-lite", "--dtype", "fp8")
    one_line_error(code, err, "fp8")


def test_layout_options_and_their_errors():
    code, _, err = cli(["simulate", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--tp", "4",
                          "--ep", "4", "--pp", "2", "--num-requests", "20", "--format", "json"])
    assert code == 0, err
    code, _, err = cli(["simulate", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--tp", "4",
                        "--ep", "2", "--num-requests", "20"])
    one_line_error(code, err, "expert_parallel=2")
    code, _, err = cli(["simulate", "--model", "llama-3-8b", "--pp", "64", "--num-requests", "20"])
    one_line_error(code, err, "pipeline_parallel=64")
    code, _, err = cli(["run", "--model", "batchlab-tiny", "--pp", "2"])
    one_line_error(code, err, "--pp")


def test_a_layout_or_gpu_figures_with_a_profile_are_refused():
    code, _, err = cli(["simulate", "--profile", "default", "--pp", "2", "--num-requests", "4"])
    one_line_error(code, err, "pipeline_parallel", "profile")
