"""Pilot verdicts: one row per task group of each ``specd pilot`` run.

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pilot_verdicts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("pilot", sa.String(253), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("task_group", sa.String(32), nullable=False),
        sa.Column("decision", sa.String(32), nullable=False),
        sa.Column("crossover_rps", sa.Float(), nullable=True),
        sa.Column("regression_ok", sa.Integer(), nullable=False),
        sa.Column("candidate", sa.Text(), nullable=False),
        sa.Column("reasons", sa.JSON(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.UniqueConstraint("pilot", "started_at", "task_group", name="uq_pilot_verdicts_key"),
    )
    op.create_index("ix_pilot_verdicts_pilot", "pilot_verdicts", ["pilot"])


def downgrade() -> None:
    op.drop_table("pilot_verdicts")
