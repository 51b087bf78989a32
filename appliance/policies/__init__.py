"""Snapshot policies: schedules, retention, consistency steps, and their runs."""
