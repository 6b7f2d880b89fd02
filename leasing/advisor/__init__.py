"""Ask by task: a pure memory estimate (estimator) and the ranked card models that suit it
(recommend). Writes nothing."""
