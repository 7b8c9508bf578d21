"""Contracts shared by the worker, the operator and the dashboard.

Nothing heavy is imported here (no torch, no kopf, no streamlit): every part depends on
this package, so it must stay cheap to import.
"""
