"""Sources: one module per collector (procfs, rapl, nvml, emonpi, hooks)."""
