"""Studies that reproduce the published claims about batching, one module each, with
a markdown report and PNG plots. Imported in claim order, so `--list` reads 1 to 4, then
paging, prefix caching, then the fidelity study (simulator vs real backend)."""
from batchlab.experiments.studies.registry import SIZES, STUDIES, Study, get_study, register
from batchlab.experiments.studies import batching, static_vs_continuous, tradeoff, latency_vs_load  # noqa: E402,F401
from batchlab.experiments.studies import paging  # noqa: E402,F401
from batchlab.experiments.studies import prefix_caching  # noqa: E402,F401
from batchlab.experiments.studies import fidelity  # noqa: E402,F401

__all__ = ["SIZES", "STUDIES", "Study", "get_study", "register"]
