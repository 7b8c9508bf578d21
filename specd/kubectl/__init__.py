"""``kubectl specd``: the SpeculativeService plugin (an installed ``kubectl-specd``).

``render`` turns objects into the tables and lines the verbs print (pure); ``cli`` parses the
verbs, talks to the API with the user's kubeconfig (as kubectl does) and sends the controls
through ``specd.operator.rollout.controls``, the same patches the dashboard and the tests use.
"""
