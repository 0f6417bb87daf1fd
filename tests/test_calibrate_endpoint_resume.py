"""`calibrate --endpoint --out DIR` killed after some probes (issue 46, item 4): the same
command into DIR sends only the probes not finished, with the seeds the first run would
have used, and fits them all; a changed design, a folder it did not write, or one from
before probes.json is refused in one line that gives the exact --from-replay command
fitting the finished probes. The server, the replays and the fit are stood in for: what
is tested is which probes go out, with which seeds, and what is said."""
from __future__ import annotations

import json
import sys
import shlex
from types import SimpleNamespace

import pytest

from batchlab.calibration.from_replay.probes import design
from batchlab.experiments.calibrate import endpoint
from batchlab.experiments.cli import main

URL = "http://127.0.0.1:9/v1"


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (not even `except Exception`)."""


@pytest.fixture
def server(monkeypatch):
    """Records each probe sent (name, seed) and each fit; seats as the server states them."""
    state = SimpleNamespace(sent=[], fitted=[], seats=16, kill_after=None, warmups=0)

    def send(args, d, name, w, seed):
        if state.kill_after is not None and len(state.sent) == state.kill_after:
            d.mkdir(parents=True)
            (d / "config.json").write_text("{}")  # a probe cut off mid-way: no result.json
            raise Killed
        state.sent.append((name, seed))
        d.mkdir(parents=True, exist_ok=True)
        (d / endpoint.DONE).write_text(json.dumps({"seed": seed}))

    def warm(args, base):
        state.warmups += 1

    monkeypatch.setattr(endpoint, "_send_probe", send)
    monkeypatch.setattr(endpoint, "_warm_up", warm)
    monkeypatch.setattr(endpoint, "make_target", lambda *a, **k: SimpleNamespace(model="batchlab-tiny", url=URL))
    monkeypatch.setattr(endpoint, "load_prior", lambda args, model: (None, "prior"))
    monkeypatch.setattr(endpoint, "settings_for", lambda args, url, prior: (
        SimpleNamespace(max_num_seqs=SimpleNamespace(value=state.seats)), ""))
    monkeypatch.setattr(endpoint, "read_all", lambda paths, model: [SimpleNamespace(where=p) for p in paths])
    monkeypatch.setattr(endpoint, "fit_and_report",
                        lambda args, replays, *a, **k: state.fitted.append([r.where for r in replays]) or 0)
    return state


def calibrate(out, *extra) -> int:
    return main(["calibrate", "--endpoint", URL, "--out", str(out), "--max-num-seqs", "16", *extra])


def test_a_killed_calibration_resumes_where_it_stopped(server, tmp_path, capsys):
    names = [n for n, _ in design(1024, 16)]
    out = tmp_path / "probes"
    server.kill_after = 3
    with pytest.raises(Killed):
        calibrate(out, "--probe-seed", "500")
    assert [n for n, _ in server.sent] == names[:3] and not server.fitted
    server.kill_after = None
    assert calibrate(out) == 0  # no --probe-seed: the first run's
    err = capsys.readouterr().err
    assert f"3 probes finished before ({', '.join(names[:3])}), {len(names) - 3} to send" in err
    assert server.sent == [(n, 500 + 1 + k) for k, n in enumerate(names)]  # each once, its own seed
    assert server.fitted == [[str(out / n) for n in names]]
    assert server.warmups == 2
    assert calibrate(out) == 0  # all finished: nothing sent, fitted again
    assert len(server.sent) == len(names) and server.warmups == 2 and len(server.fitted) == 2


@pytest.mark.parametrize("change, words", [
    (lambda s: ["--probe-seed", "7"], "probe_seed 500 (now 7)"),
    (lambda s: ["--probe-max-prompt", "256"], "probe_max_prompt 1024 (now 256)"),
    (lambda s: setattr(s, "seats", 4) or [], "seats 16 (now 4)"),
])
def test_a_changed_design_is_refused_with_the_fit_command(server, tmp_path, capsys, change, words):
    out = tmp_path / "probes"
    server.kill_after = 2
    with pytest.raises(Killed):
        calibrate(out, "--probe-seed", "500")
    server.kill_after = None
    assert calibrate(out, *change(server)) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert words in line and "new --out" in line, line
    fit = line.split("as they are: ", 1)[1]
    argv = shlex.split(fit)
    names = [n for n, _ in design(1024, 16)][:2]
    assert argv[:3] == ["batchlab", "calibrate", "--from-replay"]
    assert argv[3:5] == [str(out / n) for n in names] and argv[5] == "--metrics"
    assert "--max-num-seqs" in argv and argv[-2:] == ["--out", str(out / "profile.json")]
    assert len(server.sent) == 2  # nothing more was sent


def test_a_folder_it_did_not_write_is_refused_and_old_probes_can_be_fitted(server, tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    assert calibrate(other) == 2
    assert "no probes.json" in capsys.readouterr().err
    old = tmp_path / "old"  # as a run from before probes.json leaves its probes
    for name in ("batch-1", "batch-4"):
        (old / name).mkdir(parents=True)
        (old / name / "result.json").write_text("{}")
    assert calibrate(old) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"--from-replay {old / 'batch-1'} {old / 'batch-4'} --metrics" in line
    assert not server.sent


def test_ctrl_c_says_how_to_go_on(server, tmp_path, capsys, monkeypatch):
    names = [n for n, _ in design(1024, 16)]
    out = tmp_path / "probes"
    server.kill_after = 3
    monkeypatch.setattr(sys.modules[__name__], "Killed", KeyboardInterrupt)
    assert calibrate(out, "--probe-seed", "9") == 130
    err = capsys.readouterr().err
    assert f"the same command again sends the {len(names) - 3} probes not finished" in err
    assert f"or fit the 3 finished: batchlab calibrate --from-replay {out / names[0]} " in err
