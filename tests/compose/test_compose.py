"""docker-compose.yml, .env.example and the agent's config in the image, checked offline."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
ENV_EXAMPLE = ROOT / ".env.example"
AGENT_CONFIG = ROOT / "deploy" / "nrg-docker.toml"
VAR = re.compile(r"\$\{(\w+)")


def env_example() -> dict[str, str]:
    out = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


@pytest.fixture(scope="module")
def compose() -> str:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose)")
    return binary


def config(
    compose: str, file: Path, env_file: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    args = [compose, "-f", str(file), "--project-directory", str(ROOT), "--env-file", str(env_file)]
    clean = {k: v for k, v in os.environ.items() if k not in env_example()}
    return subprocess.run(
        [*args, "config", *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=clean,
    )


def test_compose_config_passes_with_the_example_env(compose: str) -> None:
    proc = config(compose, COMPOSE, ENV_EXAMPLE, "-q")
    assert proc.returncode == 0, proc.stderr


def test_a_misspelt_key_fails(compose: str, tmp_path: Path) -> None:
    bad = tmp_path / "docker-compose.yml"
    bad.write_text(COMPOSE.read_text().replace("healthcheck:", "healthchek:", 1))
    proc = config(compose, bad, ENV_EXAMPLE, "-q")
    assert proc.returncode != 0
    assert "healthchek" in proc.stderr


def test_the_secrets_are_required(compose: str, tmp_path: Path) -> None:
    env = tmp_path / "env"
    env.write_text("".join(f"{k}={v}\n" for k, v in env_example().items() if k != "INFLUX_TOKEN"))
    proc = config(compose, COMPOSE, env, "-q")
    assert proc.returncode != 0
    assert "INFLUX_TOKEN" in proc.stderr


def mount(volume: str | dict[str, object]) -> tuple[str, str, str]:
    """(source, target, "ro" or "rw") of a short or long volume entry."""
    if isinstance(volume, dict):
        mode = "ro" if volume.get("read_only") else "rw"
        return str(volume["source"]), str(volume["target"]), mode
    source, target, *mode = volume.split(":")
    return source, target, (mode or ["rw"])[0]


def test_the_stack_as_resolved(compose: str) -> None:
    proc = config(compose, COMPOSE, ENV_EXAMPLE)
    assert proc.returncode == 0, proc.stderr
    stack = yaml.safe_load(proc.stdout)
    services = stack["services"]
    assert set(services) >= {"influxdb", "grafana", "agent"}  # agent-nvidia: its profile is off
    for name in ("influxdb", "grafana", "agent"):
        assert "healthcheck" in services[name], name
    mounts = {target: mode for _, target, mode in map(mount, services["agent"]["volumes"])}
    assert mounts["/host/proc"] == mounts["/host/sys"] == "ro"
    grafana_mounts = {target for _, target, _ in map(mount, services["grafana"]["volumes"])}
    assert {"/etc/grafana/provisioning", "/var/lib/grafana/dashboards"} <= grafana_mounts
    env = services["influxdb"]["environment"]
    assert env["DOCKER_INFLUXDB_INIT_ADMIN_TOKEN"] == env_example()["INFLUX_TOKEN"]


def test_the_nvidia_profile_adds_the_gpu_agent(compose: str) -> None:
    clean = {k: v for k, v in os.environ.items() if k not in env_example()}
    proc = subprocess.run(
        [
            compose,
            "-f",
            str(COMPOSE),
            "--project-directory",
            str(ROOT),
            "--env-file",
            str(ENV_EXAMPLE),
            "--profile",
            "nvidia",
            "config",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=clean,
    )
    assert proc.returncode == 0, proc.stderr
    gpu = yaml.safe_load(proc.stdout)["services"]["agent-nvidia"]
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["driver"] == "nvidia"


def test_env_example_names_every_variable_the_stack_uses() -> None:
    used = set(VAR.findall(COMPOSE.read_text()))
    defined = set(env_example())
    assert used - defined == set()
    assert defined - used <= {"COMPOSE_PROFILES"}
    # Every variable of the agent's config reaches the agent's container.
    agent_env = yaml.safe_load(COMPOSE.read_text())["x-agent"]["environment"]
    assert set(VAR.findall(AGENT_CONFIG.read_text())) <= set(agent_env)


def nrg_list(config_file: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "acquisition.cli", "list", "-c", str(config_file)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), **env},
    )


def test_the_agent_config_in_the_image_parses() -> None:
    env = {k: v for k, v in env_example().items() if k.startswith(("INFLUX_", "NRG_", "EMONPI_"))}
    proc = nrg_list(AGENT_CONFIG, env)
    assert proc.returncode == 0, proc.stderr
    for collector in ("procfs", "rapl", "nvml", "emonpi", "hooks"):
        assert re.search(rf"^{collector}\s", proc.stdout, re.M), collector


def test_a_misspelt_agent_config_key_fails(tmp_path: Path) -> None:
    bad = tmp_path / "nrg.toml"
    bad.write_text(AGENT_CONFIG.read_text().replace("socket_path", "sockt_path"))
    proc = nrg_list(bad, {"INFLUX_TOKEN": "t"})
    assert proc.returncode != 0
    assert "sockt_path" in proc.stderr


def test_the_image_carries_that_config() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY deploy/nrg-docker.toml /etc/nrg/nrg.toml" in dockerfile
    assert '"/etc/nrg/nrg.toml"' in dockerfile
