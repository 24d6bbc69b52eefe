"""nrg's core: points, line protocol, the bus, the scheduler, config and the agent.

Importing ``acquisition`` never imports torch or any plugin; the training-side library is
``acquisition.torch`` and plugins live in ``collectors`` and ``sinks``.
"""

from __future__ import annotations

from acquisition.point import Point

__all__ = ["Point", "__version__"]

__version__ = "0.1.0"
