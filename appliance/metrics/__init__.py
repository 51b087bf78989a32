"""Metrics: the collector, bounded history, Prometheus exposition and advice."""
