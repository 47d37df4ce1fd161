"""Measure: timing, replay checks, the capture tour."""
