"""`batchlab sweep`: a grid of configurations, each point a simulation or a capacity
search, run on any executor, streamed to disk, resumable, with a Pareto table."""
