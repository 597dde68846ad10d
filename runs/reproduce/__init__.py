"""dlsched.runs.reproduce: the papers' claims, run and reported beside the papers' numbers.

:mod:`.baselines_report` runs every paper scenario under the baselines that fit it.
"""
