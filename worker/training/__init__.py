"""Drafter training: data, heads, draft model, calibration, evaluation."""
