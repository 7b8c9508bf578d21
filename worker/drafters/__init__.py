"""Drafters: the nets (nets.py) and their artifacts (artifacts.py)."""
