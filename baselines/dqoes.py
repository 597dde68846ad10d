"""DQoES: differentiated quality-of-experience scheduling of inference containers.

Source: the DQoES journal version, as ``docs/papers/dqoes.md`` summarises it: Section III-C (the
quality ``q_i = o_i - p_i`` and the sets G, S, B), Section IV-A with Algorithm 1 (performance
management on a worker) and Section IV-B with Algorithm 2 (the adaptive listener); Section V-A
gives the parameter values ``alpha = beta = 0.1`` and ``IV_initial = 10 s``. The preprint
differs only in Algorithm 2, lines 14 and 18; ``listener="preprint"`` selects it.

The algorithm core (:func:`classify`, :func:`performance_management`,
:func:`adaptive_listener`) works on the quantities of one round under the paper's names, so it can
be checked line by line; :class:`DQoES` builds those quantities from telemetry and turns the new
limits into a :class:`~dlsched.envs.decision.Decision`.

Choices the paper leaves open, and what this module does:

- **Units.** Alg. 1 multiplies a limit by ``R_G * beta``, so the step size depends on the unit
  of the resource usage; ``resource_unit`` says which. ``"cores"`` (default) measures ``r_i``,
  ``R_G``, ``L`` and ``T_R`` in cores, the units of ``docker stats`` and of Section IV-A's
  ``docker update --cpus`` example. It is also the reading under which the printed update
  matches Section IV-A's prose (G's limits fall by about ``R_G * beta`` per round) and the
  replay model reproduces Section V-B-1's timeline (target 40 s: S reached within about 100 s,
  a brief overshoot into B, then 10 in S). ``"fraction"`` measures them as fractions of the
  worker's cores, which makes every step ``cores`` times smaller: target 40 s still converges,
  but only 2 of the 10 varied targets of Section V-B-2 are met when its 600 s episode ends.
- **The limit of an uncapped container.** Alg. 1 line 18 scales ``L(c_i, t)``, which Docker leaves
  unset until DQoES first caps a container. With ``uncapped_limit="usage"`` (default) an uncapped
  container's limit is read as its measured usage ``r_i``, the cap that leaves it where it is;
  with ``"capacity"`` it is ``T_R``, and the first reductions take effect only once the cap has
  fallen below the usage, many rounds later.
- **The resource that lifts B.** Line 22 scales B's limits by ``R_G`` in both versions of the
  paper, although Section IV-A says B receives what G released; it is implemented as printed
  (``b_resource="R_G"``), so B containers gain nothing in a round where no container is in G.
  ``b_resource="R_B"`` uses B's own usage instead. As printed, a container that overshoots into B
  after G has emptied stays there (in the replay model this is what keeps a few of the varied
  targets of Section V-B-2 unsatisfied).
- **The listener's clock.** Algorithm 2 watches the sets every environment interval (the
  monitoring period) and runs Algorithm 1 every ``IV``, or at once when ``|S|`` drops (line 20).
  A container that has not completed a batch yet is in no set and keeps its limit.
- **Several workers.** Both algorithms run "on ``W_i``": each worker has its own listener,
  interval and sets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dlsched.baselines.base import Baseline, round_due
from dlsched.baselines.parameters import check_choice, check_number
from dlsched.envs.decision import Decision
from dlsched.envs.scenarios.model import JobKind
from dlsched.envs.telemetry import JobState, JobTelemetry, Telemetry

LISTENERS = ("journal", "preprint")
B_RESOURCES = ("R_G", "R_B")
UNCAPPED_LIMITS = ("usage", "capacity")
RESOURCE_UNITS = ("cores", "fraction")


@dataclass(frozen=True)
class Container:
    """One container's quantities at time ``t`` (Alg. 1, lines 3-5).

    Attributes:
        c: the container (job id).
        o: its QoE target ``o_i`` (seconds per batch).
        p: its performance ``p_i``, the latency of its last batch (seconds).
        r: its resource usage ``r_i = R(c_i, t)``.
        L: its limit ``L(c_i, t)``.
    """

    c: str
    o: float
    p: float
    r: float
    L: float

    @property
    def q(self) -> float:
        """The quality ``q_i = o_i - p_i`` (line 5): positive when faster than the target."""
        return self.o - self.p


@dataclass(frozen=True)
class Classes:
    """The sets and sums of Alg. 1, lines 2-15."""

    G: tuple[str, ...]
    S: tuple[str, ...]
    B: tuple[str, ...]
    Q_G: float
    Q_B: float
    R_G: float
    R_B: float


@dataclass(frozen=True)
class PerformanceRound:
    """One run of Alg. 1: the classes and ``L(c_i, t + 1)`` of every container given."""

    classes: Classes
    L: dict[str, float]


def classify(containers: Sequence[Container], alpha: float) -> Classes:
    """Alg. 1, lines 2-15: sort the containers into G, S and B and sum their qualities and usage.

    Args:
        containers: the measured containers of one worker.
        alpha: the tolerance: G if ``q_i > alpha * o_i``, B if ``q_i < -alpha * o_i``, else S.
    """
    G: list[str] = []
    S: list[str] = []
    B: list[str] = []
    Q_G = Q_B = R_G = R_B = 0.0
    for ci in containers:
        if ci.q > alpha * ci.o:  # line 6
            G.append(ci.c)
            Q_G = ci.q + Q_G
            R_G = ci.r + R_G
        elif ci.q < -alpha * ci.o:  # line 10
            B.append(ci.c)
            Q_B = ci.q + Q_B
            R_B = ci.r + R_B
        else:  # line 14
            S.append(ci.c)
    return Classes(tuple(G), tuple(S), tuple(B), Q_G, Q_B, R_G, R_B)


def performance_management(
    containers: Sequence[Container],
    *,
    alpha: float,
    beta: float,
    C: int,
    T_R: float,
    b_resource: str = "R_G",
) -> PerformanceRound:
    """Alg. 1 (journal, Section IV-A): the next limits of one worker's containers.

    Args:
        containers: the measured containers of the worker, with their limits ``L(c_i, t)``.
        alpha: the tolerance of the classification (lines 6 and 10).
        beta: the amplitude of one round's adjustment (lines 18 and 22).
        C: ``|C|``, the number of containers on the worker, measured or not (lines 19-20).
        T_R: the most a container may get (lines 23-24).
        b_resource: ``"R_G"`` scales B's increase by G's usage as line 22 prints it; ``"R_B"``
            by B's own usage.

    Returns:
        The classes and ``L(c_i, t + 1)`` of every container given; S keeps its limit.
    """
    classes = classify(containers, alpha)
    R_lift = classes.R_G if b_resource == "R_G" else classes.R_B
    L_next: dict[str, float] = {}
    for ci in containers:
        L = ci.L
        if ci.c in classes.G:
            L = ci.L * (1 - ci.q / classes.Q_G * classes.R_G * beta)  # line 18
            if L < 1 / (2 * C):  # line 19
                L = 1 / (2 * C)  # line 20
        elif ci.c in classes.B:
            L = ci.L * (1 + ci.q / classes.Q_B * R_lift * beta)  # line 22
            if L > T_R:  # line 23
                L = T_R  # line 24
        L_next[ci.c] = L
    return PerformanceRound(classes, L_next)


@dataclass(frozen=True)
class ListenerState:
    """What Alg. 2 carries from one round to the next.

    Attributes:
        IV: the interval between runs of Alg. 1 (seconds).
        i: consecutive rounds in which both ``Q_G`` and ``Q_B`` approached 0.
        Q_G: ``Q_G(t)``, the last round's sum of G's qualities (``None`` before the first).
        Q_B: ``Q_B(t)``.
        Q_S: ``Q_S(t) = |S|``.
    """

    IV: float
    i: int = 0
    Q_G: float | None = None
    Q_B: float | None = None
    Q_S: int | None = None


@dataclass(frozen=True)
class ListenerStep:
    """One round of Alg. 2: the new state, and whether Alg. 1 must run at once (line 20)."""

    state: ListenerState
    execute_now: bool


def adaptive_listener(
    state: ListenerState,
    Q_G: float,
    Q_B: float,
    Q_S: int,
    *,
    IV_initial: float,
    variant: str = "journal",
) -> ListenerStep:
    """Alg. 2 (journal, Section IV-B): adapt the interval of Alg. 1 to the trend of the sets.

    Args:
        state: the listener's state after the previous round.
        Q_G: ``Q_G(t + 1)``, this round's sum of the qualities in G (lines 3-5).
        Q_B: ``Q_B(t + 1)`` (lines 6-8).
        Q_S: ``Q_S(t + 1) = |S|`` (lines 9-11).
        IV_initial: the interval the journal version resets to (line 18).
        variant: ``"journal"``, or ``"preprint"``: doubles at ``i >= 2`` (line 14) and halves the
            interval instead of resetting it (line 18).

    Returns:
        The new state and whether to execute Alg. 1 now. The first round only records the sums.
    """
    IV, i = state.IV, state.i
    execute_now = False
    if state.Q_G is None or state.Q_B is None or state.Q_S is None:
        i = 0
    elif Q_G < state.Q_G and Q_B > state.Q_B:  # line 12: both approach 0
        i = i + 1  # line 13
        if (i > 2) if variant == "journal" else (i >= 2):  # line 14
            IV = IV * 2  # line 15
            i = 0  # line 16
    elif Q_S < state.Q_S:  # line 17
        IV = IV_initial if variant == "journal" else IV / 2  # line 18
        i = 0  # line 19
        execute_now = True  # line 20
    else:
        i = 0  # lines 21-23: IV unchanged
    return ListenerStep(ListenerState(IV, i, Q_G, Q_B, Q_S), execute_now)


class DQoES(Baseline):
    """DQoES (journal version): move each inference container's latency towards its target.

    Every environment interval the adaptive listener (Alg. 2) classifies the measured containers
    of each worker; every ``IV`` seconds, or at once when ``|S|`` drops, Alg. 1 cuts the limits of
    G and raises those of B. Between runs the limits in force are held. See the module docstring
    for the choices the paper leaves open.

    Args:
        alpha: the satisfaction tolerance of the classes (Section V-A: 0.1).
        beta: the amplitude of one adjustment (Section V-A: 0.1).
        iv_initial_s: ``IV_initial``, seconds between runs of Alg. 1 (Section V-A: 10).
        listener: ``"journal"`` (Alg. 2 as in the journal) or ``"preprint"``.
        b_resource: ``"R_G"`` (line 22 as printed) or ``"R_B"``.
        t_r: ``T_R``, the most a container may get, as a fraction of its worker's cores (in
            ``resource_unit="cores"`` it is applied as that many cores).
        uncapped_limit: ``"usage"`` or ``"capacity"``: what ``L(c_i, t)`` of an uncapped
            container is.
        resource_unit: ``"cores"`` or ``"fraction"`` of the worker's cores.
    """

    name = "dqoes"
    kinds = (JobKind.INFERENCE,)

    def __init__(
        self,
        alpha: float = 0.1,
        beta: float = 0.1,
        iv_initial_s: float = 10.0,
        listener: str = "journal",
        b_resource: str = "R_G",
        t_r: float = 1.0,
        uncapped_limit: str = "usage",
        resource_unit: str = "cores",
    ) -> None:
        super().__init__()
        self.alpha = check_number(self.name, "alpha", alpha, low=0.0, high=1.0, high_open=True)
        self.beta = check_number(self.name, "beta", beta, low=0.0, high=1.0, low_open=True)
        self.iv_initial_s = check_number(
            self.name, "iv_initial_s", iv_initial_s, low=0.0, low_open=True
        )
        self.listener = check_choice(self.name, "listener", listener, LISTENERS)
        self.b_resource = check_choice(self.name, "b_resource", b_resource, B_RESOURCES)
        self.t_r = check_number(self.name, "t_r", t_r, low=0.0, high=1.0, low_open=True)
        self.uncapped_limit = check_choice(
            self.name, "uncapped_limit", uncapped_limit, UNCAPPED_LIMITS
        )
        self.resource_unit = check_choice(self.name, "resource_unit", resource_unit, RESOURCE_UNITS)
        self._listeners: dict[int, ListenerState] = {}
        self._last_run_s: dict[int, float] = {}

    def reset(self) -> None:
        self._listeners = {}
        self._last_run_s = {}

    def act(self, telemetry: Telemetry) -> Decision:
        limits: dict[str, float] = {}
        for worker in telemetry.workers:
            unit = 1.0 if self.resource_unit == "fraction" else worker.cores
            running = [
                job for job in telemetry.on_worker(worker.index) if job.state is JobState.RUNNING
            ]
            containers = [
                self._container(job, worker.cores, unit)
                for job in running
                if job.latency_s is not None and job.target_s is not None
            ]
            classes = classify(containers, self.alpha)
            state = self._listeners.get(worker.index, ListenerState(IV=self.iv_initial_s))
            step = adaptive_listener(
                state,
                classes.Q_G,
                classes.Q_B,
                len(classes.S),
                IV_initial=self.iv_initial_s,
                variant=self.listener,
            )
            self._listeners[worker.index] = step.state
            due = round_due(self._last_run_s.get(worker.index), telemetry.time_s, step.state.IV)
            if not (due or step.execute_now):
                continue  # the limits in force hold until Alg. 1 runs again
            self._last_run_s[worker.index] = telemetry.time_s
            if not containers:
                continue
            result = performance_management(
                containers,
                alpha=self.alpha,
                beta=self.beta,
                C=len(running),
                T_R=self.t_r * unit,
                b_resource=self.b_resource,
            )
            for job_id, L in result.L.items():
                limits[job_id] = L / unit
        return Decision(limits=limits)

    def listener_state(self, worker: int) -> ListenerState | None:
        """The adaptive listener's state on ``worker`` (``None`` before its first round)."""
        return self._listeners.get(worker)

    def _container(self, job: JobTelemetry, cores: float, unit: float) -> Container:
        assert job.target_s is not None and job.latency_s is not None
        r = job.cpu_usage / cores * unit
        capacity = self.t_r * unit
        uncapped = job.limit >= 1.0
        L = job.limit * unit
        if uncapped:
            L = r if self.uncapped_limit == "usage" and r > 0 else capacity
        return Container(c=job.job_id, o=job.target_s, p=job.latency_s, r=r, L=L)
