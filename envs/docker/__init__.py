"""dlsched.envs.docker: the Docker backend, real containers in wall-clock time.

:mod:`.backend` runs every job in a labelled container and measures it from outside, keeping
what it knows of each job in :mod:`.records`; :mod:`.sandbox` says how a workload container is
confined (its user, capabilities, file system, memory and pids); :mod:`.containers` holds the
labels and lists and removes the containers that carry them; :mod:`.exit_cleanup` removes a live
episode's containers on SIGINT/SIGTERM and at exit; :mod:`.cgroup` reads a container's CPU time
and limit from its cgroup files; :mod:`.container_output` follows the JSON lines a workload
prints; :mod:`.image` builds the workload image.
"""
