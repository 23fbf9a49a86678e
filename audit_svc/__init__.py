"""The audit service: tamper-evident Merkle log with signed checkpoints."""
