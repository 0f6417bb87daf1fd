"""A served-engine profile: the constants of terms.py fitted on served benchmarks, with
where they came from and how they did on rows left out of their fit. Written by
`batchlab calibrate --from-served`, read by `--served-engine FILE` (simulate, capacity, validate --served-benchmarks)."""
from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from batchlab.core import atomic
from batchlab.core.cost.served.terms import ServedTerms
from batchlab.core.cost.shipped import shipped_dir

SERVED_PROFILE_VERSION = 4  # 2: symm_mem_efficiency; 3: GEMM rates by weight format, held terms;
# 4: routed experts at the fused-MoE share (a version-3 mxfp4 rate holds that share in it)


class HeldOutStats(BaseModel):
    model_config = ConfigDict(extra="forbid")
    by: str  # model | tp | concurrency
    left_out: str
    rows: int
    tpot_median_pct: float  # median |error| of mean TPOT, the left-out rows priced by a fit without them
    tpot_p90_pct: float
    slow_share: float
    # mean TTFT the same way, under the client the fit recorded (None: a profile from before it was judged)
    ttft_median_pct: float | None = None
    ttft_p90_pct: float | None = None
    terms: dict[str, float] = {}  # the fold's fitted terms: how far they move (capacity --sensitivity)


class ServedProfile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int = SERVED_PROFILE_VERSION
    engine: str
    engine_source: str
    terms: dict[str, float]
    fitted_on: str  # the benchmark file and its rows
    rms_log: float  # of the fit's own rows
    at_bound: list[str]  # terms the rows pushed to a bound: not told by them
    held: list[str] = []  # rate terms at their prior (core/cost/served/formats.py): no row ran the format
    heldout: list[HeldOutStats]
    created: str

    def served_terms(self) -> ServedTerms:
        return ServedTerms(**self.terms)

    def save(self, path: str | Path) -> None:
        atomic.write_text(path, self.model_dump_json(indent=1) + "\n")


SHIPPED = "vllm"  # core/cost/profiles/served/vllm.json: the default price's served-engine terms


def shipped_served_profile() -> Path:
    return shipped_dir("served") / f"{SHIPPED}.json"


def load_served_profile(path: str | Path) -> ServedProfile:
    """One-line ValueError naming the file for anything unreadable."""
    try:
        data = json.loads(Path(path).read_text())
        p = ServedProfile.model_validate(data)
        p.served_terms()  # in bounds
    except OSError as e:
        raise ValueError(f"{path}: cannot read a served-engine profile ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not JSON ({e.msg}, line {e.lineno})") from None
    except ValidationError as e:
        err = e.errors()[0]
        raise ValueError(f"{path}: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {str(e).splitlines()[0]}") from None
    if p.version != SERVED_PROFILE_VERSION:
        raise ValueError(f"{path}: served-engine profile version {p.version}, expected {SERVED_PROFILE_VERSION}: "
                         f"write it again with batchlab calibrate --from-served")
    return p
