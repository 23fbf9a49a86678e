"""The web console: the Decision Center and executions for reviewers, requesters and operators.

Its own process in the mesh (``python -m console_svc``, started by ``agentmesh
up``): an HTTP server for browsers, and an mTLS client of the supervisor (and,
for operators, of audit and policy) as ``spiffe://agentmesh.local/svc/console``.
People sign in through the identity provider (:mod:`console_svc.signin`); every
action is sent with the signed-in user's own assertion, so the supervisor and
the policy engine decide exactly as for the CLI. Pages are rendered on the
server with autoescaping templates (:mod:`console_svc.app`); a little script
follows a running execution over server-sent events fed by WatchExecution.
"""
