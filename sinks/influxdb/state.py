"""The InfluxDB sink's state: four states, named events, one place that changes it.

========== ==================================================================================
state      meaning
========== ==================================================================================
ok         the spool is empty and the server answers: batches are posted directly
replaying  the server answers and the spool holds points: new batches queue behind them
retrying   the server is down, hangs or is overloaded: everything goes to the spool
settings   the server refuses the writes (401/403/404): a setting must change; points kept
========== ==================================================================================

Events: ``backlog`` (the spool holds points), ``failed`` (a retryable failure), ``refused`` (a
settings failure), ``answered`` (a write succeeded), ``drained`` (the spool became empty).
"""

from __future__ import annotations

import enum
from collections.abc import Callable

__all__ = ["Event", "SinkState", "StateMachine"]


class SinkState(enum.Enum):
    OK = "ok"
    REPLAYING = "replaying"
    RETRYING = "retrying"
    SETTINGS = "settings"


class Event(enum.Enum):
    BACKLOG = "backlog"
    FAILED = "failed"
    REFUSED = "refused"
    ANSWERED = "answered"
    DRAINED = "drained"


_S = SinkState
_TRANSITIONS: dict[Event, dict[SinkState, SinkState]] = {
    Event.BACKLOG: {_S.OK: _S.REPLAYING},
    Event.FAILED: {s: _S.RETRYING for s in _S},
    Event.REFUSED: {s: _S.SETTINGS for s in _S},
    Event.ANSWERED: {_S.RETRYING: _S.REPLAYING, _S.SETTINGS: _S.REPLAYING},
    Event.DRAINED: {_S.REPLAYING: _S.OK},
}
"""Event → {from: to}; an event not listed for the current state leaves it unchanged."""


class StateMachine:
    """Holds the state and its reason; ``on_change(old, new, reason)`` hears every change."""

    def __init__(
        self,
        on_change: Callable[[SinkState, SinkState, str], None] | None = None,
    ) -> None:
        self.state = SinkState.OK
        self.reason = ""
        self._on_change = on_change

    def fire(self, event: Event, reason: str = "") -> SinkState:
        """Apply ``event``; the only place the state changes. Returns the new state."""
        old = self.state
        new = _TRANSITIONS[event].get(old, old)
        if event in (Event.FAILED, Event.REFUSED):
            self.reason = reason
        elif new in (SinkState.OK, SinkState.REPLAYING):
            self.reason = ""
        if new is not old:
            self.state = new
            if self._on_change is not None:
                self._on_change(old, new, reason)
        return new

    @property
    def healthy(self) -> bool:
        """The server answers (ok or replaying)."""
        return self.state in (SinkState.OK, SinkState.REPLAYING)
