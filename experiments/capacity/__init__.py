"""Capacity planning: the highest rate a configuration carries within SLOs (max-rate),
the fewest replicas that carry a load (replicas); both built on one point evaluation."""
