"""Processors: they consume points from the bus and emit derived points (attributed energy,
per-process power). They import only the core (``acquisition``), never collectors or sinks."""
