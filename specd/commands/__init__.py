"""Subcommands of the ``specd`` CLI, one module each (see specd.cli)."""
