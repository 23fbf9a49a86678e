"""The ``agentmesh`` command line: certificates, tokens, the launcher and the operator's tools.

It stands above the base package and the services: its offline checks (``audit verify`` reads the audit
log's file, ``data load`` the capability service's store) use their code, which ``agentmesh`` never does.
"""
