"""Specialist agents: one process per agent, deterministic rules first."""
