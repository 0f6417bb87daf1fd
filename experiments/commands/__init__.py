"""One module per `batchlab` subcommand. Each has `add_parser(subparsers)`, which imports
only light modules (the option groups), and `run(args)`, which parses what is left,
builds the config, calls the library and renders; the library loads inside `run`, so
that a command pays only for what it uses. No command imports another: what two share
(option groups, defaults and setup, the runtime loader, renderers) lives in library
modules both import."""

# In the order `batchlab --help` lists them.
COMMANDS = ("simulate", "run", "calibrate", "workload", "experiment", "validate", "capacity",
            "sweep", "serve", "replay")
