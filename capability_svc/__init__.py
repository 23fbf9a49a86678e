"""The capability runtime: registry, grant verification, governed execution."""
