"""One module per `batchlab` subcommand. Each has `add_parser(subparsers)` and `run(args)`,
which parses what is left, builds the config, calls the library and renders. The command
line imports only the module of the command being run (experiments/cli.py), so a module
imports its library at its top; what must stay unloaded until a run uses it (torch,
matplotlib, httpx, scipy) loads inside the function that needs it, which says why. No
command imports another: what two share (option groups, defaults and setup, the runtime
loader, renderers) lives in library modules both import."""

# Each command's one-line help, in the order `batchlab --help` lists them: that listing
# imports no command module (tests/test_cli_imports.py checks these match the modules').
COMMANDS = {
    "simulate": "simulate serving a workload (default: embedded demo)",
    "run": "serve a workload for real on the torch backend",
    "calibrate": "time the backend, fit the cost model, save a profile",
    "workload": "inspect and convert workloads and traces",
    "experiment": "reproduce a claim about batching: report + plots",
    "validate": "run a workload for real and simulated, report the error",
    "capacity": "capacity planning: max-rate | replicas | deploy | speculation",
    "sweep": "a grid of simulations or capacity searches, with a Pareto table",
    "serve": "serve the backend over an OpenAI-compatible HTTP API",
    "replay": "send a workload to an OpenAI-compatible server, measure it",
}
