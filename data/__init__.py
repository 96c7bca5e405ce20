"""The demo corpus (``sources/``) and ``failure_matrix.csv``, shipped as package data.

This folder stays at the top of the repository for learners to browse; ``pyproject.toml`` maps
it to the package ``agentkit.data`` so that an installed kit carries it. Nothing to import.
"""
