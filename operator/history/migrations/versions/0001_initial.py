"""The first schema: rollouts, their events and measurements, policy changes.

Revision ID: 0001
Revises:
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "rollouts",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("service", sa.String(253), nullable=False),
        sa.Column("service_uid", sa.String(64), nullable=False),
        sa.Column("stable_version", sa.String(128), nullable=False),
        sa.Column("canary_version", sa.String(128), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.UniqueConstraint("service_uid", "canary_version", "started_at",
                            name="uq_rollouts_key"),
    )
    op.create_index("ix_rollouts_namespace", "rollouts", ["namespace"])
    op.create_index("ix_rollouts_service", "rollouts", ["service"])
    op.create_table(
        "rollout_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("rollout_id", sa.Integer(),
                  sa.ForeignKey("rollouts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Integer(), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("actor", sa.String(253), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.UniqueConstraint("rollout_id", "at", "action", "step",
                            name="uq_rollout_events_key"),
    )
    op.create_index("ix_rollout_events_rollout_id", "rollout_events", ["rollout_id"])
    op.create_table(
        "analysis_measurements",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("rollout_id", sa.Integer(),
                  sa.ForeignKey("rollouts.id", ondelete="CASCADE"), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("step", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("metric", sa.String(32), nullable=False),
        sa.Column("task_group", sa.String(32), nullable=False),
        sa.Column("query", sa.Text(), nullable=True),
        sa.Column("window", sa.String(32), nullable=False),
        sa.Column("canary", sa.Float(), nullable=True),
        sa.Column("stable", sa.Float(), nullable=True),
        sa.Column("value", sa.Float(), nullable=True),
        sa.Column("verdict", sa.String(16), nullable=False),
        sa.Column("message", sa.Text(), nullable=True),
        sa.UniqueConstraint("rollout_id", "at", "name", "task_group",
                            name="uq_measurements_key"),
    )
    op.create_index("ix_analysis_measurements_rollout_id", "analysis_measurements",
                    ["rollout_id"])
    op.create_table(
        "policy_changes",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(253), nullable=False),
        sa.Column("service", sa.String(253), nullable=False),
        sa.Column("service_uid", sa.String(64), nullable=False),
        sa.Column("task_group", sa.String(32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.String(64), nullable=False),
        sa.Column("applied", sa.Integer(), nullable=False),
        sa.Column("before", sa.JSON(), nullable=False),
        sa.Column("after", sa.JSON(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.UniqueConstraint("service_uid", "task_group", "at", name="uq_policy_changes_key"),
    )
    op.create_index("ix_policy_changes_namespace", "policy_changes", ["namespace"])
    op.create_index("ix_policy_changes_service", "policy_changes", ["service"])


def downgrade() -> None:
    op.drop_table("policy_changes")
    op.drop_table("analysis_measurements")
    op.drop_table("rollout_events")
    op.drop_table("rollouts")
