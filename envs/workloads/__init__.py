"""The real deep-learning workloads the Docker backend runs, and their contract with it.

Workloads (PyTorch on the CPU, data shipped in ``data/digits.npz``; see :mod:`.catalog`):

- training: ``mlp-digits``, ``cnn-digits``, ``gru-digits``, ``vae-digits``;
- inference services: ``resnet-svc``, ``vgg-svc``, ``mobilenet-svc``.

This package has two names: ``dlsched.envs.workloads`` in the project and the top-level
``dlsched_workloads`` inside the workload image, which holds this folder and not dlsched. So
nothing here imports dlsched, and imports within the package are relative.

Contract with the Docker backend
--------------------------------
Image
    ``dlsched.envs.docker.image.IMAGE_TAG`` = ``dlsched-workloads:<IMAGE_VERSION>``, the version
    ending in a hash of this folder, so a change here needs a rebuild. ``image_present(client)``
    says whether an engine has it; ``build_hint()`` gives the command that builds it (``dlsched
    image build --offline``). The image carries the label ``dlsched.image=1`` (never
    ``dlsched.managed``, which its containers would inherit).

Command
    ``python -m dlsched_workloads <workload> [--iterations N] [--start-iteration K]
    [--batch-size B] [--seed S] [--checkpoint PATH] [--threading tuned|stock]``

    - ``--iterations N``: training: the job's total iterations (default: the workload's);
      inference: stop after N batches in all (default: serve until stopped).
    - ``--start-iteration K``: units already done elsewhere (a migrated job); the counts in the
      events continue from K. A training job given ``--checkpoint`` resumes from the file if it
      exists (its iteration then replaces K) and writes it when stopped; without a checkpoint
      the model restarts from its initial weights.
    - ``--batch-size B``: samples per iteration or images per batch (default: the workload's).
    - ``--seed S``: initial weights and data order (default 0).
    - ``--threading``: ``tuned`` (default) or ``stock``; see Threads below.

Output
    One JSON object per line on stdout, flushed at once (:mod:`.events` has the types and
    ``parse_event``, which returns ``None`` for any other line; stderr and stray stdout lines
    such as torch warnings are not events)::

        {"event": "start", "time": <unix s>, "workload": "mlp-digits", "kind": "training",
         "threads": 2, "start_iteration": 0}
        {"event": "iteration", "time": ..., "iteration": 1, "loss": 2.30, "accuracy": 0.06,
         "threads": 2}
        {"event": "done", "time": ..., "iterations": 1250}
        {"event": "batch", "time": ..., "batch": 1, "latency_s": 2.9, "images": 100,
         "threads": 1}

    ``iteration`` and ``batch`` count units completed, this one included. ``accuracy`` is that
    of the iteration's minibatch, ``null`` for ``vae-digits`` (no classes). ``loss`` is
    ``null`` if it is not finite. ``threads`` and ``start_iteration`` are additions to the
    original contract; readers may ignore them.

Exit status
    Training: 0 after ``done``; 143 when stopped by SIGTERM before its last iteration.
    Inference: 0 when stopped by SIGTERM or after ``--iterations`` batches. SIGTERM is honoured
    at the end of the current unit (the workload is pid 1 in its container, where an unhandled
    SIGTERM would be ignored). 2: bad arguments.

Threads
    OpenMP threads wait passively (``OMP_WAIT_POLICY=PASSIVE`` unless set otherwise), so that
    a thread waiting for a descheduled partner does not spin on a shared core. Before every
    unit the workload reads its CPU quota (cgroup v1 ``cpu.cfs_quota_us`` /
    ``cpu.cfs_period_us`` or v2 ``cpu.max``, under ``DLSCHED_CGROUP_ROOT`` if set) and sets
    ``torch.set_num_threads(ceil(quota / period))``, at least 1 and at most the cores it may run
    on; without a quota, those cores (:mod:`.cpu_quota`). With ``--threading stock`` it does
    neither, and runs as an unmodified torch program would: one thread per usable core whatever
    the quota, OpenMP's own wait policy.
"""
