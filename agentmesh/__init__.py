"""agentmesh: a gRPC service mesh that runs governed multi-agent work.

This package holds what every role shares: contracts (``agentmesh.v1``,
generated), identity and PKI, the mTLS transport with its interceptors,
telemetry, configuration, the launcher and the command line.
"""

__version__ = "0.1.0"
