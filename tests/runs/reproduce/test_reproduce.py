"""dlsched reproduce: the claims file, the statistics, the verdict rule, the report end to end."""

from __future__ import annotations

import dataclasses
import json
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
import yaml
from mlflow import MlflowClient

from dlsched.baselines import make
from dlsched.envs.errors import UnknownNameError
from dlsched.envs.scenarios.file_format import dump_scenario, load_scenario
from dlsched.envs.scenarios.model import JobKind, Scenario
from dlsched.envs.telemetry import JobState
from dlsched.runs.cli import main
from dlsched.runs.evaluation import (
    ContainerSample,
    EpisodeMetrics,
    EpisodeResult,
    Estimate,
    JobOutcome,
    PolicyIdentity,
    StepRecord,
    run_episode,
)
from dlsched.runs.reproduce import runner
from dlsched.runs.reproduce.baselines_report import report
from dlsched.runs.reproduce.claims import ClaimsError
from dlsched.runs.reproduce.claims_loader import CLAIMS_FILE, load_claims
from dlsched.runs.reproduce.statistics import STATISTICS, EpisodePair
from dlsched.runs.reproduce.verdict import Direction, Expectation, Verdict, judge
from dlsched.runs.tracking.target import ENV_VAR

# ---------------------------------------------------------------------------------- claims file

#: The claims issue 13 lists, by the id the claims file gives each.
REQUIRED_CLAIMS = (
    "dqoes-vb1-target20-all-in-b",
    "dqoes-vb1-target20-even-split",
    "dqoes-vb1-target20-latency-350s",
    "dqoes-vb1-target40-all-in-s",
    "dqoes-vb2-burst-seven-in-s",
    "dqoes-vb2-burst-target5-largest-share",
    "dqoes-vb2-fixed50-eight-in-s",
    "dqoes-vc1-random-s-grows",
    "dqoes-vc2-cluster-dqoes-26",
    "dqoes-vc2-cluster-default-3",
    "flowcon-63-poc-vae-share",
    "flowcon-63-10-jobs-faster",
    "flowcon-63-10-makespan",
    "flowcon-63-15-jobs-faster",
    "flowcon-64-20-jobs-faster",
    "flowcon-64-20-mean-completion",
    "flowcon-64-20-makespan",
    "flowcon-64-40-jobs-faster",
    "flowcon-64-60-homogeneous-makespan",
    "flowcon-64-60-heterogeneous-makespan",
    "specon-20-best-job",
    "specon-20-mean-completion",
    "specon-20-makespan",
    "tradl-best-job-time-to-target",
)


def test_the_shipped_claims_file_validates_and_names_only_what_exists():
    claims = load_claims()
    ids = [claim.id for claim in claims.claims]
    assert set(REQUIRED_CLAIMS) <= set(ids)
    for claim in claims.claims:
        for measure in filter(None, (claim.measure, claim.twin)):
            scenario = load_scenario(measure.scenario)
            statistic = STATISTICS[measure.statistic]
            assert scenario.kind in statistic.kinds, claim.id
            assert statistic.paired == (measure.reference is not None), claim.id
            for policy in measure.policies:
                make(policy)
        assert claim.unit in claims.units
    for reading in claims.readings:
        assert (
            make(reading.policy, **dict(reading.params)).params() != make(reading.policy).params()
        )
    # The file holds claims, never results: no verdict or measured value is written into it.
    raw = CLAIMS_FILE.read_text()
    assert not re.search(r"^\s*(verdict|ours|result)\s*:", raw, re.MULTILINE)
    assert claims.claim("tradl-best-job-time-to-target").twin is None
    assert claims.claim("flowcon-63-10-jobs-faster").twin is not None


def minimal_claims() -> dict:
    """A valid one-claim file, to break one field at a time."""
    return {
        "format": 1,
        "version": 1,
        "units": {"services": {"absolute": 0.5}, "percent": {"absolute": 2}},
        "readings": {"dqoes": [{"name": "preprint", "params": {"listener": "preprint"}}]},
        "claims": [
            {
                "id": "target20",
                "paper": "dqoes",
                "section": "V-B-1",
                "claim": "all ten stay in B",
                "value": 10,
                "unit": "services",
                "measure": {
                    "scenario": "dqoes-resnet50-burst-target20",
                    "policy": "dqoes",
                    "statistic": "b_final",
                },
            }
        ],
    }


def write(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def broken(change) -> dict:
    data = minimal_claims()
    change(data)
    return data


def _measure(data: dict) -> dict:
    return data["claims"][0]["measure"]


MALFORMED = {
    "unknown scenario": (
        lambda d: _measure(d).update(scenario="dqoes-nowhere"),
        "claims[0].measure.scenario",
        "dqoes-nowhere",
    ),
    "unknown policy": (
        lambda d: _measure(d).update(policy="dqos"),
        "claims[0].measure.policy",
        "'dqos' is not one of",
    ),
    "unknown statistic": (
        lambda d: _measure(d).update(statistic="b_end"),
        "claims[0].measure.statistic",
        "'b_end' is not one of",
    ),
    "statistic of the other kind": (
        lambda d: _measure(d).update(statistic="makespan_s"),
        "claims[0].measure.scenario",
        "makespan_s applies to training",
    ),
    "paired statistic without a reference": (
        lambda d: _measure(d).update(statistic="ratio", args={"of": "b_final"}),
        "claims[0].measure.reference",
        "compares against a reference",
    ),
    "missing argument": (
        lambda d: _measure(d).update(statistic="latency_mean_at"),
        "claims[0].measure.args",
        "needs argument 'time_s'",
    ),
    "parameters in a claim": (
        lambda d: _measure(d).update(params={"beta": 0.2}),
        "claims[0].measure.params",
        "readings",
    ),
    "value on the wrong side of its direction": (
        lambda d: d["claims"][0].update(direction="lower", no_effect=5),
        "claims[0].value",
        "is not lower than no_effect 5",
    ),
    "unknown unit": (
        lambda d: d["claims"][0].update(unit="containers"),
        "claims[0].unit",
        "'containers' is not one of",
    ),
    "duplicate id": (
        lambda d: d["claims"].append(dict(d["claims"][0])),
        "claims[1].id",
        "used by an earlier claim",
    ),
    "bad reading": (
        lambda d: d["readings"]["dqoes"][0].update(params={"listener": "draft"}),
        "readings.dqoes[0].params",
        "'draft' is not a known option",
    ),
    "missing field": (
        lambda d: d["claims"][0].pop("section"),
        "claims[0].section",
        "missing",
    ),
    "misspelt field": (
        lambda d: d["claims"][0].update(figur="Fig. 2"),
        "claims[0].figur",
        "unknown field; expected one of id, paper, section, claim, unit, measure, figure",
    ),
    "text for a number": (
        lambda d: d["claims"][0].update(no_effect="five"),
        "claims[0].no_effect",
        "read the string 'five', not a number",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_claim_is_refused_with_its_file_line_and_field(tmp_path, case):
    change, field, words = MALFORMED[case]
    path = write(tmp_path, broken(change))
    with pytest.raises(ClaimsError) as raised:
        load_claims(path)
    message = str(raised.value)
    assert str(path) in message
    line = next(entry for entry in message.splitlines() if field in entry)
    assert re.search(r"line \d+: ", line), line
    assert words in line, line


def test_the_minimal_file_is_valid_and_yaml_errors_give_the_line(tmp_path):
    assert [c.id for c in load_claims(write(tmp_path, minimal_claims())).claims] == ["target20"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: 1\nclaims: [\n  - id: x\n")
    with pytest.raises(ClaimsError, match=r"bad\.yaml: YAML syntax error: .* at line \d"):
        load_claims(bad)
    with pytest.raises(ClaimsError, match="cannot read claims file"):
        load_claims(tmp_path / "missing.yaml")


def claims_bomb() -> str:
    """A 400-byte claims file whose claims are aliases of aliases: 9 ** 9 strings expanded (on
    6863cc0, 44 s and 3.85 GB, then a MemoryError traceback)."""
    lines = ['a: &a ["x","x","x","x","x","x","x","x","x"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ",".join([f"*{previous}"] * 9) + "]")
    head = "format: 1\nversion: 1\nunits: {n: {absolute: 1}}\n"
    return head + "\n".join(lines) + "\nclaims: *i\n"


CLAIMS_MEMORY_LIMIT_BYTES = 2 << 30
"""Address space of the refusing process: the imports of ``dlsched reproduce`` with room to
spare, and half what the bomb took before it was bounded."""


def test_a_claims_file_is_bounded_as_a_scenario_file_is(tmp_path):
    """An alias bomb is refused at once, in bounded memory, as the scenarios' reading refuses
    one; and so are an oversized file and a duplicate key, which that reading also catches."""
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(claims_bomb())

    def limit_memory() -> None:
        resource.setrlimit(
            resource.RLIMIT_AS, (CLAIMS_MEMORY_LIMIT_BYTES, CLAIMS_MEMORY_LIMIT_BYTES)
        )

    result = subprocess.run(
        [sys.executable, "-c", "import sys; from dlsched.runs.cli import main; "
         "sys.exit(main(sys.argv[1:]))", "reproduce", "--claims", str(bomb), "--no-tracking"],
        capture_output=True, text=True, timeout=120, preexec_fn=limit_memory, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert f"claims file {bomb}: the YAML holds more than 1,000,000 values" in result.stderr
    assert "DLSCHED_MAX_YAML_VALUES" in result.stderr

    huge = tmp_path / "huge.yaml"
    huge.write_text(write(tmp_path, minimal_claims()).read_text() + "#" * (1 << 20))
    with pytest.raises(ClaimsError, match=r"larger than 1,048,576 bytes.*DLSCHED_MAX_FILE_BYTES"):
        load_claims(huge)
    twice = tmp_path / "twice.yaml"
    twice.write_text(write(tmp_path, minimal_claims()).read_text() + "version: 2\n")
    with pytest.raises(ClaimsError, match=r"version is given again \(first on line 2\)"):
        load_claims(twice)


def test_selecting_claims_by_id_pattern_or_paper():
    claims = load_claims()
    assert {c.paper for c in claims.select(["tradl"]).claims} == {"tradl"}
    chosen = claims.select(["dqoes-vb2-*"])
    assert [c.id for c in chosen.claims] == [
        c.id for c in claims.claims if c.id.startswith("dqoes-vb2-")
    ]
    assert [i.id for i in chosen.investigations] == ["dqoes-varied-targets-gap"]
    with pytest.raises(ClaimsError, match="matches no claim"):
        claims.select(["dqoes-vb9-*"])


# ---------------------------------------------------------------------------------- verdicts


def est(mean, low=None, high=None, n=10) -> Estimate:
    return Estimate(mean, low, high, n)


def test_the_verdict_of_a_paper_value_inside_our_interval_is_reproduced():
    seven = Expectation(7, tolerance=0.5)
    assert judge(seven, est(6.8, 6.2, 7.4)).verdict is Verdict.REPRODUCED
    # outside the CI but within the tolerance
    assert judge(seven, est(6.4, 6.3, 6.6)).verdict is Verdict.REPRODUCED
    # one episode: an interval of one point
    assert judge(seven, est(7.0, n=1)).verdict is Verdict.REPRODUCED


def test_the_verdict_outside_our_interval_without_a_direction_is_not_reproduced():
    judgement = judge(Expectation(7, tolerance=0.5), est(5.8, 5.3, 6.3))
    assert judgement.verdict is Verdict.NOT_REPRODUCED
    assert "[5.30, 6.30] is below the paper's 7 ± 0.50" in judgement.reason


def test_the_verdict_outside_our_interval_in_the_claimed_direction_is_direction_only():
    gain = Expectation(18.9, tolerance=3.78, direction=Direction.HIGHER, no_effect=0)
    judgement = judge(gain, est(5.0, 3.0, 7.0))
    assert judgement.verdict is Verdict.DIRECTION_ONLY
    assert "below the paper's 18.9" in judgement.reason
    share = Expectation(25, tolerance=5, direction=Direction.LOWER, no_effect=50)
    assert judge(share, est(40, 38, 42)).verdict is Verdict.DIRECTION_ONLY
    assert judge(share, est(27, 24, 30)).verdict is Verdict.REPRODUCED


def test_the_verdict_in_the_wrong_direction_is_not_reproduced_even_within_tolerance():
    gain = Expectation(2.47, tolerance=2.0, direction=Direction.HIGHER, no_effect=0)
    wrong = judge(gain, est(-1.0, -1.5, -0.5))
    assert wrong.verdict is Verdict.NOT_REPRODUCED
    assert wrong.reason.startswith("wrong direction")
    unclear = judge(gain, est(0.5, -1.0, 2.0))  # within the tolerance, but reaches 0
    assert unclear.verdict is Verdict.NOT_REPRODUCED
    assert unclear.reason.startswith("no clear effect")


def test_a_qualitative_claim_needs_only_its_direction_and_undefined_is_not_reproduced():
    grows = Expectation(None, direction=Direction.HIGHER, no_effect=0)
    assert judge(grows, est(2.0, 1.0, 3.0)).verdict is Verdict.REPRODUCED
    assert judge(grows, est(0.0, 0.0, 0.0)).verdict is Verdict.NOT_REPRODUCED
    undefined = judge(Expectation(7, 0.5), Estimate(None, None, None, 0))
    assert (undefined.verdict, undefined.reason) == (
        Verdict.NOT_REPRODUCED,
        "undefined in every episode",
    )


# ---------------------------------------------------------------------------------- statistics


def training_result(policy: str, jobs: dict[str, float | None], losses=None) -> EpisodeResult:
    """A hand-made training episode: completion time per job (arrival 0), optional losses per
    step as ``{time: {job: loss}}`` with tiers (0.2, 0.1)."""
    scenario = Scenario(name="hand", kind=JobKind.TRAINING, workers=(), groups=())
    outcomes = tuple(
        JobOutcome(job, "w", 0.0, done, (0.2, 0.1) if losses else None)
        for job, done in jobs.items()
    )
    steps = []
    for index, (time_s, by_job) in enumerate(sorted((losses or {0.0: {}}).items())):
        samples = tuple(
            ContainerSample(job, "w", JobState.RUNNING, 0, 1.0, 1.0, 1.0, None, None, 0.1, None,
                            loss, 0)
            for job, loss in by_job.items()
        )  # fmt: skip
        steps.append(StepRecord(index, time_s, None, len(samples), 0, 0, 0, 0, 0, 0, 0, samples))
    finished = [t for t in jobs.values() if t is not None]
    metrics = EpisodeMetrics(
        0.0,
        mean_completion_s=statistics.fmean(finished) if len(finished) == len(jobs) else None,
        makespan_s=max(finished) if len(finished) == len(jobs) else None,
    )
    return EpisodeResult(
        PolicyIdentity(policy), scenario, "replay", 0, tuple(steps), outcomes, metrics
    )


def test_paired_statistics_compare_job_by_job_with_the_reference():
    ours = training_result("flowcon", {"j0": 50.0, "j1": 120.0, "j2": 90.0, "j3": None})
    theirs = training_result("default", {"j0": 100.0, "j1": 100.0, "j2": 100.0, "j3": 80.0})
    pair = EpisodePair(ours, theirs)
    # j0 and j2 beat the reference; j1 does not; j3 finished only under the reference
    assert STATISTICS["jobs_faster_percent"].value(pair, {"times": "completion"}) == 50.0
    assert STATISTICS["best_job_reduction"].value(pair, {"times": "completion"}) == 50.0
    assert STATISTICS["reduction"].value(pair, {"of": "makespan_s"}) is None  # j3 unfinished
    done = EpisodePair(
        training_result("flowcon", {"j0": 60.0, "j1": 90.0}),
        training_result("default", {"j0": 100.0, "j1": 100.0}),
    )
    assert STATISTICS["reduction"].value(done, {"of": "makespan_s"}) == pytest.approx(10.0)
    assert STATISTICS["reduction"].value(done, {"of": "mean_completion_s"}) == pytest.approx(25.0)
    assert STATISTICS["ratio"].value(done, {"of": "makespan_s"}) == pytest.approx(0.9)


def test_the_time_to_the_first_tier_is_read_off_the_losses():
    losses = {0.0: {"j0": 2.3, "j1": 2.3}, 10.0: {"j0": 0.19, "j1": 1.0}, 20.0: {"j1": 0.2}}
    ours = training_result("tradl", {"j0": 30.0, "j1": 40.0}, losses)
    mean = STATISTICS["mean_time_to_first_tier_s"].value(EpisodePair(ours), {})
    assert mean == pytest.approx(15.0)  # j0 at 10 s, j1 at 20 s
    slower = {
        0.0: {"j0": 2.3, "j1": 2.3},
        10.0: {"j0": 1.0, "j1": 1.0},
        20.0: {"j0": 0.1, "j1": 0.1},
    }
    theirs = training_result("default", {"j0": 30.0, "j1": 40.0}, slower)
    pair = EpisodePair(ours, theirs)
    assert STATISTICS["best_job_reduction"].value(pair, {"times": "first_tier"}) == 50.0
    assert STATISTICS["jobs_faster_percent"].value(pair, {"times": "first_tier"}) == 50.0
    never = training_result("default", {"j0": 30.0}, {0.0: {"j0": 2.3}, 10.0: {"j0": 0.5}})
    assert STATISTICS["mean_time_to_first_tier_s"].value(EpisodePair(never), {}) is None


def test_the_tradl_scenario_brings_every_job_to_its_first_tier_under_every_baseline():
    scenario = load_scenario("tradl-two-tier-8")
    assert scenario.kind is JobKind.TRAINING and scenario.groups[0].loss_targets == (0.2, 0.13)
    for policy in ("default", "tradl", "flowcon"):
        result = run_episode(scenario, make(policy), seed=0)
        assert result.metrics.unfinished_jobs == 0, policy
        time = STATISTICS["mean_time_to_first_tier_s"].value(EpisodePair(result), {})
        assert time is not None and 0 < time < scenario.horizon_s, policy


# ---------------------------------------------------------------------------------- end to end

TWO_CHEAP = ("dqoes-vb1-target20-all-in-b", "flowcon-63-poc-vae-share")


@pytest.fixture
def no_env_uri(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)


def test_reproduce_two_claims_end_to_end(capsys, monkeypatch, tmp_path, mlflow_store, no_env_uri):
    folder, uri = mlflow_store
    monkeypatch.chdir(folder)
    experiment = f"reproduce-{uuid.uuid4().hex[:8]}"
    code = main(
        ["reproduce", "--only", TWO_CHEAP[0], "--only", TWO_CHEAP[1], "--episodes", "2",
         "--out", str(tmp_path), "--tracking-uri", uri, "--experiment", experiment,
         "--no-progress"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    (report_dir,) = tmp_path.iterdir()
    data = json.loads((report_dir / "results.json").read_text())
    rows = {row["id"]: row for row in data["claims"]}
    assert list(rows) == list(TWO_CHEAP)

    # Ours is what `dlsched evaluate` measures on the same seeds.
    by_hand = [
        run_episode(load_scenario("dqoes-resnet50-burst-target20"), make("dqoes"), seed)
        for seed in (0, 1)
    ]
    b_final = [episode.metrics.b_final for episode in by_hand]
    outcome = rows[TWO_CHEAP[0]]["outcome"]
    assert outcome["values"] == b_final
    assert outcome["estimate"]["mean"] == pytest.approx(statistics.fmean(b_final))
    assert outcome["judgement"]["verdict"] in {v.value for v in Verdict}
    vae = rows[TWO_CHEAP[1]]
    assert vae["paper_value"] == 25 and len(vae["outcome"]["values"]) == 2
    assert [r["reading"] for r in vae["readings"]] == [
        r.name for r in load_claims().readings_of("flowcon")
    ]

    markdown = (report_dir / "report.md").read_text()
    assert "## Verdict rule" in markdown
    claims_table = markdown.split("## Claims")[1].split("\n\n")[1]
    header, _, *lines = claims_table.splitlines()
    assert "paper value" in header and "ours (95% CI)" in header and "verdict" in header
    row = next(line for line in lines if line.startswith(f"| {TWO_CHEAP[0]} |"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[4] == "10"  # the paper's value
    assert cells[5].startswith(f"{statistics.fmean(b_final):.1f}")
    assert cells[7].split(" (")[0] == outcome["judgement"]["verdict"]
    assert "### flowcon" in markdown and "nl-uncapped" in markdown  # the readings' table
    for figure in re.findall(r"\]\((figures/[^)]+\.png)\)", markdown):
        assert (report_dir / figure).is_file()
    assert "satisfied.png" in markdown and "limits.png" in markdown

    page = (report_dir / "report.html").read_text()
    assert page.count("data:image/png;base64,") == markdown.count("](figures/")
    assert not re.search(r'(src|href)="(?!data:)', page)  # self-contained
    assert f"<td>{TWO_CHEAP[0]}</td>" in page
    assert TWO_CHEAP[0] in out and "report:" in err

    client = MlflowClient(uri)
    stored = client.get_experiment_by_name(experiment)
    assert stored is not None
    (parent,) = client.search_runs(
        [stored.experiment_id],
        "tags.`dlsched.kind` = 'reproduction'",
    )
    assert parent.info.run_name == report_dir.name and parent.info.status == "FINISHED"
    assert parent.data.params["claims.hash"] == data["claims_hash"]
    children = client.search_runs(
        [parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'"
    )
    assert {run.info.run_name for run in children} == set(TWO_CHEAP)
    child = next(run for run in children if run.info.run_name == TWO_CHEAP[0])
    assert child.data.metrics["paper"] == 10
    assert child.data.metrics["mean"] == pytest.approx(statistics.fmean(b_final))
    assert child.data.tags["dlsched.verdict"] == outcome["judgement"]["verdict"]
    logged = {item.path for item in client.list_artifacts(parent.info.run_id)}
    assert {"report.md", "report.html", "results.json", "claims.yaml", "figures"} <= logged


def test_the_claims_episodes_run_batched_in_processes_as_each_runs_alone():
    """The episodes of a scenario, policy and parameters run at once, the groups in two
    processes: each episode is still the one its seed gives, as `dlsched evaluate` runs it."""
    keys = [
        runner.EpisodeKey(scenario, policy, params, seed, "replay")
        for scenario, policy, params in (
            ("flowcon-poc-3", "flowcon", ()),
            ("flowcon-poc-3", "flowcon", (("nl_limit", "uncapped"),)),
            ("flowcon-poc-3", "default", ()),
            ("dqoes-resnet50-burst-target20", "dqoes", ()),
        )
        for seed in (0, 1, 2)
    ]
    together = runner.run_episodes(keys, progress=False, processes=2)
    assert list(together) == keys
    for key, result in together.items():
        alone = runner.run_key(key, load_scenario(key.scenario))
        assert (result.seed, result.policy) == (alone.seed, alone.policy)
        assert result.metrics == alone.metrics and result.steps == alone.steps, key


def test_a_workers_error_comes_back_as_itself():
    keys = [
        runner.EpisodeKey("flowcon-poc-3", "flowcn", (), 0, "replay"),
        runner.EpisodeKey("dqoes-resnet50-burst-target20", "dqoes", (), 0, "replay"),
    ]
    with pytest.raises(UnknownNameError, match="Did you mean 'flowcon'"):
        runner.run_episodes(keys, progress=False, processes=2)


def test_the_progress_bar_names_the_claims_being_run(capsys, tmp_path):
    code = main(
        ["reproduce", "--only", TWO_CHEAP[0], "--episodes", "1", "--no-tracking",
         "--out", str(tmp_path)]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    assert "reproduce:" in err and TWO_CHEAP[0] in err.split("report:")[0]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_reproduction_leaves_no_worker_running(
    tmp_path, dlsched_process, default_sigint, signum
):
    """Ctrl-C reaches the whole process group, SIGTERM (``timeout``) the command alone: either
    way the workers end with it, and it exits as a stopped command does."""
    process = dlsched_process(
        ["reproduce", "--only", "flowcon", "--no-tracking", "--no-progress", "--processes", "2",
         "--out", str(tmp_path)],
        cwd=tmp_path,
    )  # fmt: skip
    parent = psutil.Process(process.pid)
    deadline = time.monotonic() + 120
    while len(parent.children()) < 2:
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.2)
    workers = parent.children()
    time.sleep(1.0)  # under way
    if signum == signal.SIGINT:
        for each in (parent, *workers):  # a terminal's Ctrl-C
            each.send_signal(signum)
    else:
        parent.send_signal(signum)
    code = process.wait(timeout=60)
    err = process.communicate()[1]
    assert code == 128 + signum and "Traceback" not in err, err
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert alive == []


def test_reproduce_refuses_a_bad_claims_file_before_running_anything(capsys, tmp_path):
    data = minimal_claims()
    data["claims"][0]["measure"]["scenario"] = "dqoes-nowhere"
    code = main(["reproduce", "--claims", str(write(tmp_path, data)), "--no-tracking"])
    _, err = capsys.readouterr()
    assert code == 2
    assert "claims[0].measure.scenario" in err and "Traceback" not in err


def test_an_unusable_store_is_reported_before_any_episode_runs(
    capsys, monkeypatch, tmp_path, no_env_uri
):
    ran = []
    monkeypatch.setattr(runner, "run_episodes", lambda *args, **kwargs: ran.append(args))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the probe is
    code = main(
        ["reproduce", "--only", TWO_CHEAP[0], "--tracking-uri", f"http://127.0.0.1:{port}",
         "--out", str(tmp_path), "--no-progress"]
    )  # fmt: skip
    _, err = capsys.readouterr()
    assert code == 2
    assert f"http://127.0.0.1:{port}" in err and "unreachable" in err
    assert ran == [] and list(tmp_path.iterdir()) == []


def test_baselines_report_is_the_same_machinery_with_the_papers_values(capsys):
    rows = report(["dqoes-cluster-40"], seeds=(0,), policies=("dqoes", "default"))
    by_policy = {row.policy: row for row in rows}
    satisfied = {policy: row.cells[0] for policy, row in by_policy.items()}
    assert (satisfied["dqoes"].paper, satisfied["default"].paper) == (26, 3)
    by_hand = run_episode(load_scenario("dqoes-cluster-40"), make("dqoes"), 0)
    assert satisfied["dqoes"].estimate.mean == by_hand.metrics.satisfied_final
    code = main(
        [
            "baselines",
            "report",
            "--scenario",
            "dqoes-cluster-40",
            "--policy",
            "dqoes",
            "--seeds",  # the old spelling of --episodes still works, with a warning
            "1",
        ]
    )
    out, err = capsys.readouterr()
    assert code == 0
    assert "--seeds is deprecated and will be removed; use --episodes" in err
    line = next(line for line in out.splitlines() if line.startswith("dqoes-cluster-40"))
    assert "[paper: 26]" in line


# ---------------------------------------------------------------------------------- docker


@pytest.mark.docker
def test_reproduce_runs_a_claims_twin_on_the_docker_backend(
    capsys, tmp_path, docker_engine, workload_image
):
    cores = float(docker_engine.info()["NCPU"])
    smoke = load_scenario("docker-smoke-training")
    workers = tuple(dataclasses.replace(worker, cores=cores) for worker in smoke.workers)
    scenario = tmp_path / "smoke.yaml"
    scenario.write_text(dump_scenario(dataclasses.replace(smoke, workers=workers)))
    data = minimal_claims()
    data["claims"] = [
        {
            "id": "smoke-faster",
            "paper": "flowcon",
            "section": "6.3",
            "claim": "FlowCon finishes jobs sooner than Docker",
            "direction": "higher",
            "no_effect": 0,
            "unit": "percent",
            "measure": {
                "scenario": "flowcon-poc-3",
                "policy": "flowcon",
                "reference": "default",
                "statistic": "reduction",
                "args": {"of": "mean_completion_s"},
            },
            "twin": {"scenario": str(scenario), "seeds": 1},
        },
        {**minimal_claims()["claims"][0]},  # no twin: skipped on docker
    ]
    code = main(
        ["reproduce", "--claims", str(write(tmp_path, data)), "--backend", "docker",
         "--no-tracking", "--out", str(tmp_path / "out"), "--no-progress"]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0, err
    (report_dir,) = (tmp_path / "out").iterdir()
    result = json.loads((report_dir / "results.json").read_text())
    (row,) = result["claims"]
    assert row["measure"]["scenario"] == str(scenario)
    assert row["evaluate_command"].endswith("--backend docker")
    assert row["readings"] == []  # readings do not run on docker unless asked
    (value,) = row["outcome"]["values"]
    assert value is not None  # both jobs finished under both policies on the real engine
    assert result["skipped"] == [
        {"id": "target20", "reason": "no host-scale twin for the docker backend"}
    ]
    assert "1 claims skipped (no host-scale twin for the docker backend): target20" in out
