"""The SimPy world: arrivals, one engine process per replica, a router between them.
Steps are priced by a core cost model; the scheduler is core's, unchanged."""
from batchlab.sim.simulate import simulate

__all__ = ["simulate"]
