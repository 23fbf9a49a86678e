"""The supervisor: intent, agent registry, selection, task DAG, aggregation."""
