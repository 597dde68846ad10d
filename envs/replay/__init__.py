"""dlsched.envs.replay: the replay backend, in simulated time.

:mod:`.profile` reads the recorded workload profiles (``profiles/<set>/<workload>.json``);
:mod:`.sharing` shares a worker's cores among its jobs as the Linux scheduler does under quotas;
:mod:`.backend` integrates every job's progress exactly between the events that change shares.
"""
