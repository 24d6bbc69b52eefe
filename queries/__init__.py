"""nrg's query library: one question per file, ``<name>.flux`` (InfluxDB 2) and
``<name>.influxql`` (InfluxDB 1.x and 3.x) twins. Installed beside :mod:`acquisition`, which
loads them (:mod:`acquisition.queries`); there is no Python code here."""
