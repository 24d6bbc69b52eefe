"""nrg's core: points, line protocol, the bus, the scheduler, config and the agent.

Importing ``acquisition`` never imports torch or any plugin; the training-side library is
``acquisition.torch`` and plugins live in ``collectors`` and ``sinks``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from acquisition.point import Point

if TYPE_CHECKING:
    from acquisition.tracker import Tracker

__all__ = ["Point", "Tracker", "__version__"]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    # Tracker pulls in the sampler, the registry and the summary: only when asked for.
    if name == "Tracker":
        from acquisition.tracker import Tracker

        return Tracker
    raise AttributeError(f"module 'acquisition' has no attribute {name!r}")
