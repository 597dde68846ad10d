"""dlsched.envs.docker: the Docker backend, real containers in wall-clock time.

:mod:`.backend` runs every job in a labelled container and measures it from outside;
:mod:`.cgroup` reads a container's CPU time from its cgroup files; :mod:`.container_output`
follows the JSON lines a workload prints; :mod:`.image` builds the workload image.
"""
