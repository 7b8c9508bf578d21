"""The history store: every rollout, its events and analysis measurements, and (for the
tuner) every policy change with its evidence, in SQL.

``models`` (SQLAlchemy 2.0), ``migrations`` (alembic, shipped in the package; ``specd db
upgrade|current|downgrade URL``), ``store`` (idempotent writes: a handler re-run after a
restart writes no duplicate rows), ``queries`` (reads as frozen dataclasses, for ``kubectl
specd history`` and the dashboard).
SQLite file by default, PostgreSQL in production (psycopg 3: ``postgresql+psycopg://...``).
"""
