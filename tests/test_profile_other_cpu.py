"""A CPU profile priced against a run on another CPU model says so: a warning for a given
--profile, and in the description of a shipped profile that measures the machine's speed
(experiments/validation/profile_source.py)."""
from __future__ import annotations

from types import SimpleNamespace

from batchlab.core.cpu_name import cpu_name
from batchlab.core.cost.profile import load_profile
from batchlab.experiments.validation import profile_source


def runtime_like(profile) -> SimpleNamespace:
    """What check_profile reads of a backend Runtime, as the profile's own setup."""
    d = profile.device
    return SimpleNamespace(spec=profile.model, model=SimpleNamespace(name=profile.model.name),
                           device=SimpleNamespace(type=d.kind), threads=d.threads, dtype=d.dtype)


def on_cpu(profile, name: str):
    return profile.model_copy(update={"device": profile.device.model_copy(update={"name": name})})


def test_another_cpu_model_is_said_and_the_same_one_is_not():
    shipped = load_profile("batchlab-tiny-cpu")
    here, other = on_cpu(shipped, cpu_name()), on_cpu(shipped, "Some Other CPU @ 1.0GHz")
    rt = runtime_like(shipped)
    assert profile_source.check_profile(here, rt) == []
    assert profile_source.check_profile(other, rt) == [
        f"profile measured on Some Other CPU @ 1.0GHz, the real run is on {cpu_name()}"]
    assert profile_source.check_profile(other, rt, cpu=False) == []


def test_a_shipped_profile_of_another_cpu_still_prices_the_speed_and_says_so(monkeypatch):
    shipped = on_cpu(load_profile("batchlab-tiny-cpu"), "Some Other CPU @ 1.0GHz")
    monkeypatch.setattr(profile_source, "shipped_match", lambda runtime: (shipped, "batchlab-tiny-cpu"))
    cost, source = profile_source.speed_pricing(None, None, runtime_like(shipped))
    assert cost is not None and source.startswith("shipped batchlab-tiny-cpu: ")
    assert f"profile measured on Some Other CPU @ 1.0GHz, the real run is on {cpu_name()}" in source
    monkeypatch.setattr(profile_source, "shipped_match",
                        lambda runtime: (on_cpu(shipped, cpu_name()), "batchlab-tiny-cpu"))
    assert "the real run is on" not in profile_source.speed_pricing(None, None, runtime_like(shipped))[1]
