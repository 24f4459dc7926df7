"""The verifier: an LLM judge over each succeeded rollout (synth-ai's `verifier_config`).

`config` reads the job's `verifier_config` (synth-ai's fields, and evalhub's own additions),
`rewards` is the reward formula of each `reward_source`, `prompt` builds what the judge sees
and reads its answer, `judgements` claims and records judgements in the database, and
`worker` runs them on a Celery worker, each judge call made through the interceptor with a
token of its own so it is priced, recorded (as a `judge` call), redacted and budgeted.
"""
