"""The development identity provider: signs user assertions for the people of a directory file.

A stand-in for the organisation's identity provider, for development and tests
only: it lists the users of ``users.yaml`` (or ``dev_idp_users``), lets whoever
opens it pick one — no password — and hands a signed assertion (the same JWT
``agentmesh token issue`` mints, :func:`agentmesh.assertion.issue`, with the
key in ``HOME/ca/idp.key``) to the web console through an OAuth 2.0
authorization-code exchange with PKCE (S256). See :mod:`dev_idp.server`.
"""
