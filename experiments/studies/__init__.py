"""Studies that reproduce the published claims about batching (`batchlab experiment NAME`),
each with a markdown report, PNG figures, CSV tables and study.json. Imported in claim
order, so `--list` reads 1 to 4, then paging, prefix caching, KV tiers, the fidelity
study, then disaggregation.

The format of a study
- One file, experiments/studies/NAME.py (the name with `_` for `-`), in this order: the
  plan (what it serves: constants, PARAMS by size "full"/"small", workload builders), the
  simulation half, the backend half (`--backend`: functions that import torch, via
  common_backend, only inside themselves, so the module imports without torch), the
  figures, the report, and last `run`, registered with its backend half and report
  (output.py register_study, which makes run(out_dir, size, backend, quiet) from them):

      @register_study(NAME, "one line for --list", PARAMS, _serve, report)
      def run(study: StudyRun, p: dict) -> tuple[dict, list[fg.Figure]]:  # p: PARAMS[size]
          ...                                  # RowLog CSVs, study.progress(...)
          return {..., "files": [csv, *fg.filenames(figures)]}, figures

  register_study adds "name" and "size", the backend half's result (`_serve(out_dir,
  size, progress) -> (dict, figures)`) under "backend" with --backend, and ends the run
  (StudyRun.finish). A study without that shape (fidelity) calls registry.register and
  StudyRun itself. `result` holds what was measured and is JSON-able (numbers, strings, lists, dicts with
  string keys): it is returned (`--format json`), written as study.json and is all the
  report reads. finish() draws the figures, writes report.md and study.json, and adds the
  elapsed time and `provenance` (date, command, machine: CPU, Python, numpy, and torch's
  version, threads and GPU when a backend variant loaded it).
- Figures are data: experiments/figures.py (Figure -> Panels -> marks such as Line, Cdf,
  Bars, GroupedBars, SeatGrid, MarkX, plus each panel's scales, limits, labels, legend).
  A study builds them and never imports matplotlib; experiments/plots.py draws them.
- Prose lives in templates/NAME.md: named sections of markdown with str.format
  placeholders (templates.py). `report(result) -> str` picks the sections (a sentence that
  depends on the figures is a section of its own), passes numbers and the tables
  (markdown.table_of), and returns the page. Being a function of the result alone, it
  renders a stored study.json again: studies/results_page.py makes docs/results/NAME.md
  from one (`python benchmarks/results_page.py OUT_DIR`), dated and naming the machine.
- Shared helpers: common.py (cost-model preset, setup sentence, CSV row log, progress,
  sizes), common_backend.py (the loaded model, a served run, speed reference), seats.py
  (who holds which seat; utilisation over time), slo_search.py (max rate, fewest replicas).
- A new study: write NAME.py and templates/NAME.md as above and import the module below.
"""
from batchlab.experiments.studies.registry import SIZES, STUDIES, Study, get_study, register
from batchlab.experiments.studies import batching, static_vs_continuous, tradeoff, latency_vs_load  # noqa: E402,F401
from batchlab.experiments.studies import paging  # noqa: E402,F401
from batchlab.experiments.studies import prefix_caching  # noqa: E402,F401
from batchlab.experiments.studies import kv_tiers  # noqa: E402,F401
from batchlab.experiments.studies import fidelity  # noqa: E402,F401
from batchlab.experiments.studies import disaggregation  # noqa: E402,F401

__all__ = ["SIZES", "STUDIES", "Study", "get_study", "register"]
