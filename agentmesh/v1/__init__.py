"""Generated protobuf and gRPC code for agentmesh.v1. Do not edit: run scripts/gen-proto."""
