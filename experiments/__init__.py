"""The user-facing layer: experiment configs, the command line, outputs and reports."""
