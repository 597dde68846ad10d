"""dlsched.runs.fidelity: the replay model held against a real host.

:mod:`.calibration` measures workload profiles on a Docker engine. It lives above
:mod:`dlsched.envs` because it drives real containers and writes replay data.
"""
