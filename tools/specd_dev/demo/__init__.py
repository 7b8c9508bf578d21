"""``make demo``: the whole loop on one machine (see ``__main__``'s docstring)."""
