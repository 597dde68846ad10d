#!/usr/bin/env bash
# What a person sees in `mlflow ui` after a short `dlsched evaluate`: headless Chromium takes a
# screenshot of each screen a newcomer opens, into OUT_DIR (default ./mlflow-ui-screenshots):
#
#   1-experiments.png   the experiments list (one experiment per scenario)
#   2-runs.png          the scenario's runs table: the evaluation's run, its episodes under it
#   2-scores.png        the link in the experiment's note: its runs with each policy's headline
#   3-charts.png        the same runs as charts (MLflow's chart view)
#   4-evaluation.png    the evaluation's run: its headline per policy, params, tags
#   5-timeline.png      its timeline.png artifact: satisfied services over time, a line per policy
#   6-episode.png       one episode's run: its metrics over the steps
#
# What they showed with MLflow 3.17 (2026-12): the list opens in the GenAI view, its
# Description column starting with each policy's score; the runs table shows the evaluation's
# run with its 6 episodes open under it (their mlflow.runType tag), and no metric column until
# some are picked with "Columns", or the note's link opens the shared view (2-scores.png: the
# runs flat, a column per policy's headline); the chart view opens on the section "episode"
# (MLflow orders sections by the metric names' prefix before "/", its own "Model metrics" last,
# where the headlines are: one bar chart per policy and one of every episode's); the evaluation's
# run
# lists its child runs and, under Artifacts, timeline.png (satisfied services over time, a line
# per policy); an episode's "Model metrics" tab opens on its `episode/...` scores (one bar each),
# its `satisfied` line chart below them. MLflow's Assistant panel takes the right third until
# closed.
#
# It is a script, not a test, so that CI needs no browser. Needs Debian's chromium
# (`apt-get update && apt-get install -y chromium`) and dlsched installed; it runs in a new
# temporary folder (its own sqlite store) and serves MLflow on 127.0.0.1 only.
#
#   scripts/mlflow-ui-screenshots.sh [OUT_DIR]
set -euo pipefail

OUT_DIR="$(realpath -m "${1:-mlflow-ui-screenshots}")"
SCENARIO="${SCENARIO:-dqoes-resnet50-burst-target40}"
CHROMIUM="${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}"
PYTHON="${PYTHON:-$(command -v python || command -v python3)}"
if [[ -z "$CHROMIUM" ]]; then
    echo "error: no chromium on PATH; install Debian's: apt-get update && apt-get install -y chromium" >&2
    exit 2
fi
mkdir -p "$OUT_DIR"
WORK="$(mktemp -d /tmp/dlsched-mlflow-ui.XXXXXX)"
SERVER_PID=""
cleanup() {
    if [[ -n "$SERVER_PID" ]]; then
        kill -- "-$SERVER_PID" 2>/dev/null || true # the server and its workers
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
cd "$WORK"

dlsched evaluate --scenario "$SCENARIO" --policy default,dqoes --episodes 3 --no-progress

PORT="$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
setsid mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port "$PORT" \
    >"$WORK/mlflow-ui.log" 2>&1 &
SERVER_PID=$!
URL="http://127.0.0.1:$PORT"
for _ in $(seq 120); do
    curl -sf "$URL/health" >/dev/null && break
    sleep 0.5
done
curl -sf "$URL/health" >/dev/null || { cat "$WORK/mlflow-ui.log" >&2; exit 1; }

# the ids from the evaluation's tracking record, and one episode's run
read -r EXPERIMENT PARENT EPISODE < <("$PYTHON" - <<'EOF'
import json, pathlib
from mlflow import MlflowClient
record = json.loads(next(pathlib.Path("dlsched-runs").glob("*/tracking.json")).read_text())
client = MlflowClient(record["tracking_uri"])
query = f"tags.`mlflow.parentRunId` = '{record['run_id']}'"
episode = client.search_runs([record["experiment_id"]], query, max_results=1)[0]
print(record["experiment_id"], record["run_id"], episode.info.run_id)
EOF
)

shoot() { # NAME PATH
    local profile
    profile="$(mktemp -d "$WORK/chromium.XXXXXX")"
    "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$profile" --window-size=1920,1080 --virtual-time-budget=15000 \
        --screenshot="$OUT_DIR/$1" "$URL/$2" >/dev/null 2>&1
    echo "$OUT_DIR/$1"
}

shoot 1-experiments.png "#/experiments"
# MLflow opens an experiment tagged for classic ML (dlsched's are) in its "Model training" view,
# with this parameter in the address; a direct link without it shows the GenAI sidebar
ML="workflowType=machine_learning"
shoot 2-runs.png "#/experiments/$EXPERIMENT/runs?$ML"
shoot 2-scores.png "#/experiments/$EXPERIMENT/runs?viewStateShareKey=dlsched-scores&$ML"
shoot 3-charts.png "#/experiments/$EXPERIMENT/runs?compareRunsMode=CHART&$ML"
shoot 4-evaluation.png "#/experiments/$EXPERIMENT/runs/$PARENT?$ML"
shoot 5-timeline.png "#/experiments/$EXPERIMENT/runs/$PARENT/artifactPath/timeline.png?$ML"
shoot 6-episode.png "#/experiments/$EXPERIMENT/runs/$EPISODE/model-metrics?$ML"
