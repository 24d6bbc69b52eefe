"""Per-user directories of nrg (shared by the agent and the training-side library).

``NRG_STATE_DIR``, ``NRG_DATA_DIR`` and ``NRG_RUNTIME_DIR`` override the platform defaults
(``~/.local/state/nrg``, ``~/.local/share/nrg``, ``$XDG_RUNTIME_DIR/nrg``). Where there is no
``XDG_RUNTIME_DIR`` (containers, ssh sessions) the runtime dir is ``/tmp/nrg-<uid>``, created 0700.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

import platformdirs

ENV_AGENT_DATA = "NRG_AGENT_DATA"
"""Set by ``nrg-collect -- CMD`` in the job's environment: the agent's file sink directory."""

ENV_AGENT_COLLECTORS = "NRG_AGENT_COLLECTORS"
"""Set by ``nrg-collect -- CMD`` in the job's environment: JSON ``{"available": [labels],
"unavailable": {label: reason}}``, the agent's collectors."""

__all__ = [
    "ENV_AGENT_COLLECTORS",
    "ENV_AGENT_DATA",
    "data_dir",
    "default_fallback_dir",
    "default_socket_path",
    "runtime_dir",
    "state_dir",
]


def state_dir() -> Path:
    return Path(os.environ.get("NRG_STATE_DIR") or platformdirs.user_state_dir("nrg"))


def data_dir() -> Path:
    return Path(os.environ.get("NRG_DATA_DIR") or platformdirs.user_data_dir("nrg"))


def runtime_dir() -> Path:
    """Where the hooks socket lives; private to the user."""
    override = os.environ.get("NRG_RUNTIME_DIR")
    if override:
        return Path(override)
    if os.environ.get("XDG_RUNTIME_DIR"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return Path(platformdirs.user_runtime_dir("nrg"))
    return Path(tempfile.gettempdir()) / f"nrg-{os.getuid()}"


def default_socket_path(
    runtime: Path | None = None, environ: Mapping[str, str] | None = None
) -> Path:
    """The hooks socket both sides agree on: ``NRG_SOCKET``, else ``<runtime dir>/hooks.sock``."""
    env = os.environ if environ is None else environ
    override = env.get("NRG_SOCKET", "")
    return Path(override).expanduser() if override else (runtime or runtime_dir()) / "hooks.sock"


def default_fallback_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where a training job writes when no agent listens (and where the agent ingests from):
    ``NRG_FALLBACK_DIR``, else ``<data dir>/spool-hooks``."""
    env = os.environ if environ is None else environ
    override = env.get("NRG_FALLBACK_DIR", "")
    return Path(override).expanduser() if override else data_dir() / "spool-hooks"
