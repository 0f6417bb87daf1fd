"""The server's request handling without a server: sampling stays finite for every finite
setting; stop strings cut the text where the full reply would, streamed or not; every
request field is implemented or refused with a 400 naming it; one request whose
sampling or step fails fails alone while the engine loop serves the others."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from batchlab.backend.server.protocol import APIError, ChatRequest, CompletionRequest, parse
from batchlab.backend.sampling import SamplingParams, probabilities, sample_row
from batchlab.backend.server.stops import StopMatcher

finite = st.floats(allow_nan=False, allow_infinity=False, width=32)


@settings(max_examples=200, deadline=None)
@given(logits=st.lists(finite, min_size=2, max_size=40),
       temperature=st.floats(min_value=5e-324, max_value=100, allow_nan=False),
       top_p=st.floats(min_value=5e-324, max_value=1.0), top_k=st.integers(0, 50))
def test_probabilities_are_finite_for_every_finite_setting(logits, temperature, top_p, top_k):
    p = SamplingParams(temperature=max(temperature, 1e-5), top_p=top_p, top_k=top_k)
    probs = probabilities(torch.tensor(logits), p)
    assert torch.isfinite(probs).all() and (probs >= 0).all()
    assert math.isclose(float(probs.sum()), 1.0, rel_tol=1e-9)
    x = torch.tensor(logits).double()
    whole = probabilities(torch.tensor(logits), SamplingParams(temperature=p.temperature))
    assert probs[whole == whole.max()].sum() > 0  # a most likely token survives top-k and top-p
    if 0 < top_k < len(logits):  # ties with the k-th logit stay too
        kth = torch.sort(x, descending=True).values[top_k - 1]
        assert int((probs > 0).sum()) <= int((x >= kth).sum())


def test_a_tiny_temperature_is_greedy_and_a_seed_repeats():
    logits = torch.tensor([0.0, 3.0, 1.0, 2.9])
    for t in (1e-310, 5e-324, 1e-6):
        assert sample_row(logits, SamplingParams(temperature=t), torch.Generator()) == 1
    # just above greedy: still finite, still the best token (its rivals are ~1e4 below)
    assert sample_row(logits, SamplingParams(temperature=2e-5), torch.Generator()) == 1
    p = SamplingParams(temperature=1.0, seed=-7)
    draws = [[sample_row(logits, p, p.generator(torch.device("cpu"))) for _ in range(1)]
             for _ in range(3)]
    assert draws[0] == draws[1] == draws[2]
    gen = p.generator(torch.device("cpu"))
    seq = [sample_row(logits, p, gen) for _ in range(40)]
    assert len(set(seq)) > 1  # temperature 1 does draw (not argmax every time)
    gen = SamplingParams(seed=2 ** 64 - 1).generator(torch.device("cpu"))
    assert gen is not None


def test_top_p_keeps_the_smallest_set_reaching_the_mass():
    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    probs = probabilities(logits, SamplingParams(temperature=1.0, top_p=0.8))
    assert (probs > 0).tolist() == [True, True, False, False]
    assert torch.allclose(probs[:2], torch.tensor([0.625, 0.375], dtype=torch.float64))
    probs = probabilities(logits, SamplingParams(temperature=1.0, top_p=1e-300))
    assert (probs > 0).tolist() == [True, False, False, False]


def test_nonfinite_logits_fail_the_row_not_nan():
    with pytest.raises(ValueError, match="non-finite logits"):
        probabilities(torch.tensor([0.0, float("nan")]), SamplingParams(temperature=1.0))


def _run(text: str, stops: list[str], min_tokens: int = 0) -> tuple[str, bool, int]:
    m = StopMatcher(stops, lambda t: chr(t), min_tokens)
    out = ""
    for i, ch in enumerate(text):
        out += m.feed(ord(ch), last=i == len(text) - 1)
        if m.stopped:
            return out, True, i + 1
    return out, False, len(text)


@settings(max_examples=300, deadline=None)
@given(text=st.text("abc", min_size=1, max_size=30),
       stops=st.lists(st.text("abc", min_size=1, max_size=4), min_size=1, max_size=3))
def test_stop_strings_cut_where_the_full_text_first_holds_one(text, stops):
    out, stopped, used = _run(text, stops)
    ends = [text.find(s) + len(s) for s in stops if s in text]
    if ends:
        first_end = min(ends)  # the token that completes the first stop string
        assert stopped and used == first_end
        assert out == text[:min(text[:first_end].find(s) for s in stops if s in text[:first_end])]
        assert not any(s in out for s in stops)
    else:
        assert not stopped and out == text


def test_min_tokens_holds_stop_strings_off():
    assert _run("xxSTOPyySTOP", ["STOP"], min_tokens=7) == ("xxSTOPyy", True, 12)


BASE = {"model": "m", "prompt": "hi"}


@pytest.mark.parametrize("extra, words", [
    ({"max_tokens": True}, "max_tokens"),
    ({"max_tokens": "5"}, "max_tokens"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"top_p": 1.5}, "top_p"),
    ({"top_k": -2}, "top_k"),
    ({"seed": 2 ** 64}, "seed"),
    ({"seed": 1.5}, "seed"),
    ({"stop": ""}, "stop"),
    ({"stop": ["a"] * 17}, "stop"),
    ({"stop": [1]}, "stop"),
    ({"prompt": [True, 1]}, "prompt"),
    ({"logit_bias": {"5": 100}}, "logit_bias"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"repetition_penalty": 1.2}, "repetition_penalty"),
    ({"logprobs": 2}, "logprobs"),
    ({"n": 2}, "n"),
    ({"n": True}, "n"),
    ({"stop_token_ids": [3]}, "stop_token_ids"),
    ({"guided_json": {}}, "guided_json"),
    ({"frobnicate": 1}, "frobnicate"),
    ({"stream": "yes"}, "stream"),
])
def test_fields_are_implemented_or_refused_by_name(extra, words):
    with pytest.raises(APIError) as e:
        parse(CompletionRequest, {**BASE, **extra})
    assert e.value.status == 400 and words in e.value.message and e.value.param.startswith(words)


def test_neutral_and_harmless_fields_are_accepted():
    req = parse(CompletionRequest, {**BASE, "repetition_penalty": 1.0, "logprobs": None, "n": 1,
                                    "user": "u", "ignore_eos": True, "top_k": -1, "seed": -3,
                                    "stop": ["\n", "END"], "top_p": 0.9, "temperature": 0})
    assert req.stop_strings == ["\n", "END"]
    p = req.sampling(0.7)
    assert (p.temperature, p.top_p, p.top_k, p.seed) == (0, 0.9, 0, -3) and p.greedy
    chat = parse(ChatRequest, {"model": "m", "messages": [{"role": "user", "content": "x", "name": "a"}]})
    assert chat.sampling(0.7).temperature == 0.7


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.lists(finite, min_size=3, max_size=3), min_size=1, max_size=4),
       temperature=st.floats(min_value=0, max_value=1e6, allow_nan=False))
def test_a_batch_at_one_temperature_samples_a_token_per_row(rows, temperature):
    """batchlab run's Engine.sample: no finite temperature fails (1e-310 made inf/nan)."""
    from batchlab.backend.sampling import sample_rows
    out = sample_rows(torch.tensor(rows), temperature, torch.Generator().manual_seed(0))
    assert out.shape == (len(rows),) and ((0 <= out) & (out < 3)).all()
