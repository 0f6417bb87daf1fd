"""The engine settings the observed requests are simulated under, each with where it came
from: the server's /metrics (vLLM's `vllm:cache_config_info` gauge carries block_size,
num_gpu_blocks and enable_prefix_caching as labels; any `*_config_info` gauge with
max_num_seqs, max_num_batched_tokens or a batchlab policy counts too: batchlab serve's
batchlab:scheduler_config_info), the user's options, or batchlab's
default. The user's option wins over /metrics; what neither gives is said to be a default."""
from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError

from batchlab.core.checks import shown
from batchlab.core.config import SchedulerConfig

FROM_METRICS, FROM_USER, FROM_DEFAULT, FROM_PRIOR = "server /metrics", "given", "default", "the prior profile"
# Label names on a *_config_info gauge -> our setting.
METRIC_LABELS = {"block_size": "block_size", "num_gpu_blocks": "num_kv_blocks",
                 "enable_prefix_caching": "prefix_caching", "max_num_seqs": "max_num_seqs",
                 "max_num_batched_tokens": "max_num_batched_tokens", "policy": "policy"}
FIELDS = ("max_num_seqs", "max_num_batched_tokens", "num_kv_blocks", "block_size", "prefix_caching")
_INFO = re.compile(r'^([A-Za-z_:][\w:]*_config_info)\{(.*)\}\s+\S+', re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Setting:
    value: object
    source: str


@dataclass(frozen=True)
class EngineSettings:
    policy: Setting
    max_num_seqs: Setting
    max_num_batched_tokens: Setting
    num_kv_blocks: Setting
    block_size: Setting
    prefix_caching: Setting

    def scheduler(self) -> SchedulerConfig:
        return SchedulerConfig(policy=self.policy.value, max_num_seqs=self.max_num_seqs.value,
                               max_num_batched_tokens=self.max_num_batched_tokens.value,
                               num_kv_blocks=self.num_kv_blocks.value, block_size=self.block_size.value,
                               prefix_caching=self.prefix_caching.value)

    def lines(self) -> list[str]:
        out = []
        for name in ("policy",) + FIELDS:
            s = getattr(self, name)
            v = "policy's default" if s.value is None else s.value
            out.append(f"{name} {v} ({s.source})")
        return out

    def as_dict(self) -> dict:
        return {n: {"value": getattr(self, n).value, "source": getattr(self, n).source}
                for n in ("policy",) + FIELDS}


# What each setting is called where the user gives it (the command line's option).
OPTIONS = {"policy": "--policy", "max_num_seqs": "--max-num-seqs",
           "max_num_batched_tokens": "--max-num-batched-tokens", "num_kv_blocks": "--num-kv-blocks",
           "block_size": "--block-size", "prefix_caching": "--prefix-caching"}


def parse_metrics(text: str, where: str = "server /metrics") -> dict[str, object]:
    """The engine settings a Prometheus exposition states (see the module docstring), each
    checked against the bounds the same option has on the command line: a one-line
    ValueError naming `where`, the gauge and the label otherwise (block_size="0" is not a
    server's setting, and would divide by zero further on)."""
    found: dict[str, object] = {}
    for name, labels in _INFO.findall(text):
        for key, raw in _LABEL.findall(labels):
            ours = METRIC_LABELS.get(key)
            if ours is None or raw in ("", "None"):
                continue
            at = f"{where}: {name} label {key}={shown(raw)}"
            if ours == "policy":
                found[ours] = raw
            elif ours == "prefix_caching":
                if raw.lower() not in ("true", "false"):
                    raise ValueError(f"{at}: expected True or False")
                found[ours] = raw.lower() == "true"
            elif not raw.isdigit():
                raise ValueError(f"{at}: expected a whole number")
            else:
                found[ours] = int(raw)
            problem = _out_of_bounds(ours, found[ours])
            if problem:
                raise ValueError(f"{at}: {problem} (as {OPTIONS[ours]} on the command line)")
    return found


def _out_of_bounds(name: str, value: object) -> str:
    """'' where `value` is a valid SchedulerConfig `name`, else what was expected."""
    if name == "policy":
        return ""
    try:
        SchedulerConfig.model_validate({name: value})
    except ValidationError as e:
        return e.errors()[0]["msg"].removeprefix("Value error, ")
    return ""


def scrape(base_url: str, headers: dict[str, str] | None = None) -> tuple[dict[str, object], str]:
    """(settings from the server's /metrics, '' or why none could be read)."""
    import httpx  # lazy: httpx, only when a server is asked
    url = base_url.rstrip("/").removesuffix("/completions").removesuffix("/v1") + "/metrics"
    try:
        r = httpx.get(url, headers=headers or {}, timeout=10.0, trust_env=False)
    except httpx.HTTPError as e:
        return {}, f"{url} unreachable ({type(e).__name__})"
    if r.status_code != 200:
        return {}, f"{url} answered HTTP {r.status_code}"
    found = parse_metrics(r.text, url)
    return found, "" if found else f"{url} exposes no engine settings (no *_config_info gauge)"


def resolve(given: dict[str, object], scraped: dict[str, object], prior_blocks: int | None,
            prior_block_size: int | None) -> EngineSettings:
    """Each setting from the user, else /metrics, else (KV pool) the prior profile's pool
    re-cut into the block size, else batchlab's default."""
    d = SchedulerConfig()

    def pick(name: str, default) -> Setting:
        if given.get(name) is not None:
            problem = _out_of_bounds(name, given[name])
            if problem:
                raise ValueError(f"{OPTIONS[name]} {shown(given[name])}: {problem}")
            return Setting(given[name], FROM_USER)
        if scraped.get(name) is not None:
            problem = _out_of_bounds(name, scraped[name])
            if problem:  # parse_metrics checked it; a dict built elsewhere is checked here
                raise ValueError(f"{FROM_METRICS}: {name} {shown(scraped[name])}: {problem}")
            return Setting(scraped[name], FROM_METRICS)
        return Setting(default, FROM_DEFAULT)

    policy = pick("policy", d.policy)
    block = pick("block_size", d.block_size)
    blocks = pick("num_kv_blocks", None)
    if blocks.value is None and prior_blocks:
        blocks = Setting(max(1, prior_blocks * (prior_block_size or block.value) // block.value), FROM_PRIOR)
    elif blocks.value is None:
        raise ValueError("the KV pool is unknown: the server exposes no num_gpu_blocks and no "
                         "profile gives one; pass --num-kv-blocks")
    return EngineSettings(policy, pick("max_num_seqs", d.max_num_seqs),
                          pick("max_num_batched_tokens", d.max_num_batched_tokens), blocks, block,
                          pick("prefix_caching", d.prefix_caching))
