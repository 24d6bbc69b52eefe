# The nrg-collect agent. Reads the host through /host (procfs, powercap sysfs) as docker-compose.yml
# mounts it; torch is not installed here: the agent never needs it.
FROM python:3.11-slim
WORKDIR /src
COPY pyproject.toml README.md ./
COPY acquisition ./acquisition
COPY collectors ./collectors
COPY sinks ./sinks
COPY queries ./queries
RUN pip install --no-cache-dir '.[influx,nvml,serial]'
# The config docker-compose.yml runs with (it mounts the same file from deploy/).
COPY deploy/nrg-docker.toml /etc/nrg/nrg.toml
ENTRYPOINT ["nrg-collect"]
CMD ["--config", "/etc/nrg/nrg.toml", "--quiet"]
