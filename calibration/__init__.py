"""Timing sweeps on the backend, cost-model fitting, saved profiles."""
