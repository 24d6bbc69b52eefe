"""Destinations: one module per sink (file, stdout, influxdb) and the durable spool."""
