"""Energy inside the PyTorch profiler: joules per operator and kernel, power tracks in the trace.

::

    from acquisition.torch import profile   # the same object as acquisition.profiler.profile

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        train_step()
    print(prof.energy_table(sort_by="energy_total", row_limit=10))
    prof.export_chrome_trace("trace.json")  # power and energy counters; energy in each op's args

:func:`profile` takes every argument of ``torch.profiler.profile`` plus ``config`` (the agent's
TOML), ``interval_s``, ``sampler`` and ``session``; see :class:`EnergyProfile`. While it records,
nrg's own RAPL and NVML collectors run in this process (:class:`acquisition.sampler.Sampler`).

This package needs the agent's collectors, so it lives outside :mod:`acquisition.torch` (which
imports nothing from the agent side); ``acquisition.torch.profile`` forwards here lazily. Importing
it does not import torch: :func:`profile` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acquisition.errors import install_hint
from acquisition.profiler.compare import compare_profiles, format_comparison
from acquisition.profiler.energy import EnergyResult, EventEnergy, Span, compute_energy
from acquisition.profiler.series import EnergySeries, build_series
from acquisition.profiler.tables import EnergyRow
from acquisition.profiler.trace import add_energy, load_trace

if TYPE_CHECKING:
    from acquisition.profiler.wrapper import EnergyProfile

__all__ = [
    "EnergyResult",
    "EnergyRow",
    "EnergySeries",
    "EventEnergy",
    "Span",
    "add_energy",
    "build_series",
    "compare_profiles",
    "compute_energy",
    "format_comparison",
    "load_trace",
    "profile",
]


def profile(*args: Any, **kwargs: Any) -> EnergyProfile:
    """An energy-aware ``torch.profiler.profile`` (see :class:`EnergyProfile`)."""
    try:
        from acquisition.profiler.wrapper import EnergyProfile
    except ImportError as exc:  # pragma: no cover - depends on the environment
        if exc.name == "torch":
            raise ImportError(
                f"acquisition.torch.profile needs torch: {install_hint('torch')}"
            ) from exc
        raise
    return EnergyProfile(*args, **kwargs)
