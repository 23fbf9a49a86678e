"""The policy engine: Cedar-backed authorization, the only source of authority."""
