"""The model service: the only way an agent (or the supervisor) reaches a language model.

Its own process behind mTLS (``spiffe://agentmesh.local/svc/model``). A call
names a registered prompt and carries the task's grant; the policy engine
decides which models the agent may use for the tenant; routing picks one by an
explainable score; the task's and the execution's model budgets are reserved
before the call and settled from the reported usage; the answer is validated
against the prompt's schema; audit gets every call without its text. See
:mod:`model_svc.gateway`.
"""
