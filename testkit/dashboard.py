"""The Grafana dashboard for glm5svc, as code (Grafana's Python SDK, grafana-foundation-sdk).

Longer than 400 lines: the panels are data, one PanelSpec each, in the order Grafana shows
them; split, a row's panels would be spread over files.

    python -m testkit.dashboard          # write glm5svc/data/monitoring/glm5svc-dashboard.json
    python -m testkit.dashboard --check  # exit 1 when the committed JSON differs

The SDK is a development dependency (the `test` extra): the committed JSON is what an
operator imports, and it needs nothing. Rates use Grafana's `$__rate_interval` (at least four
scrapes, whatever the scrape interval and zoom); gauges without a rate read the rules'
recorded series where one exists (glm5svc/data/monitoring/glm5svc-rules.yml), so the
dashboard and the alerts agree. Every legend names the instance: `instance` is the
replica's host name in both scrape jobs (docs/observability.md).
tests/monitoring and testkit/dashboard_render.py ask Prometheus the committed JSON's queries.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import (
    dashboard,
    heatmap,
    prometheus,
    stat,
    statetimeline,
    timeseries,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "glm5svc" / "data" / "monitoring" / "glm5svc-dashboard.json"
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
SEL = 'instance=~"$instance"'
SEL_GPU = 'instance=~"$instance",gpu=~"$gpu"'
RATE = "[$__rate_interval]"
# What users send (sglang's HTTP metrics): not health checks or /metrics.
ANSWERS = f'sglang:http_responses_total{{{SEL},endpoint=~"/generate|/v1/.+"}}'
ERRORS = ANSWERS.replace("}", ',status_code=~"5.."}')


def rate(series: str, by: str = "instance") -> str:
    return f"sum by ({by}) (rate({series}{RATE}))"


def percentiles(family: str) -> tuple[Query, ...]:
    """p50, p95 and p99 of an sglang histogram, per instance."""
    return tuple(
        Query(
            f"histogram_quantile({q}, {rate(f'sglang:{family}_bucket{{{SEL}}}', 'instance, le')})",
            f"{{{{instance}}}} p{round(float(q) * 100)}",
        )
        for q in ("0.5", "0.95", "0.99")
    )


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    kind: str  # "stat", "timeseries", "states" or "heatmap"
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    width: int = 8


ROWS: tuple[tuple[str, tuple[PanelSpec, ...]], ...] = (
    (
        "Service",
        (
            PanelSpec(
                "stat",
                "Phase",
                "glm5svc's phase (glm5svc_phase == 1).",
                "none",
                (
                    Query(
                        f"max by (instance, phase) (glm5svc_phase{{{SEL}}}) == 1",
                        "{{instance}} {{phase}}",
                    ),
                ),
                width=6,
            ),
            PanelSpec(
                "stat",
                "Ready",
                "1: serving and passing checks (glm5svc_ready).",
                "none",
                (Query(f"max by (instance) (glm5svc_ready{{{SEL}}})", "{{instance}}"),),
                width=4,
            ),
            PanelSpec(
                "stat",
                "Restarts (1 h)",
                "Service starts (its uptime reset) and engine restarts in the last hour.",
                "none",
                (
                    Query(
                        f"max by (instance) (resets(glm5svc_uptime_seconds{{{SEL}}}[1h])) + max by"
                        f" (instance) (increase(glm5svc_engine_restarts_total{{{SEL}}}[1h]))",
                        "{{instance}}",
                    ),
                ),
                width=4,
            ),
            PanelSpec(
                "stat",
                "Post-start benchmark against the baseline",
                "Total tok/s change against the baseline (glm5svc_bench_baseline_change_ratio)"
                " per concurrency level, and the level's total tok/s.",
                "percentunit",
                (
                    Query(
                        f"glm5svc_bench_baseline_change_ratio{{{SEL}}}",
                        "{{instance}} c={{concurrency}} vs baseline",
                    ),
                ),
                width=5,
            ),
            PanelSpec(
                "stat",
                "Post-start benchmark tok/s",
                "The last post-start benchmark's total tok/s per concurrency level.",
                "none",
                (
                    Query(
                        f"glm5svc_bench_total_throughput_tokens_per_second{{{SEL}}}",
                        "{{instance}} c={{concurrency}}",
                    ),
                ),
                width=5,
            ),
        ),
    ),
    (
        "Engine",
        (
            PanelSpec(
                "timeseries",
                "Tokens/s",
                "Generated and prompt tokens per second.",
                "none",
                (
                    Query(rate(f"sglang:generation_tokens_total{{{SEL}}}"), "{{instance}} output"),
                    Query(rate(f"sglang:prompt_tokens_total{{{SEL}}}"), "{{instance}} prompt"),
                ),
            ),
            PanelSpec(
                "timeseries",
                "Time to first token",
                "Percentiles from sglang's histogram.",
                "s",
                percentiles("time_to_first_token_seconds"),
            ),
            PanelSpec(
                "timeseries",
                "Inter-token latency",
                "Percentiles from sglang's histogram.",
                "s",
                percentiles("inter_token_latency_seconds"),
            ),
            PanelSpec(
                "heatmap",
                "Time to first token (heatmap)",
                "Requests per second in each of sglang's TTFT buckets, the selected instances"
                " together.",
                "s",
                (
                    Query(
                        rate(f"sglang:time_to_first_token_seconds_bucket{{{SEL}}}", "le"), "{{le}}"
                    ),
                ),
            ),
            PanelSpec(
                "timeseries",
                "Requests running and queued",
                "Summed over the engine's ranks.",
                "none",
                (
                    Query(
                        f"sum by (instance) (sglang:num_running_reqs{{{SEL}}})",
                        "{{instance}} running",
                    ),
                    Query(
                        f"sum by (instance) (sglang:num_queue_reqs{{{SEL}}})", "{{instance}} queued"
                    ),
                ),
            ),
            PanelSpec(
                "timeseries",
                "KV cache in use",
                "The KV pool's share in use (sglang:token_usage).",
                "percentunit",
                (Query(f"max by (instance) (sglang:token_usage{{{SEL}}})", "{{instance}}"),),
            ),
            PanelSpec(
                "timeseries",
                "Prefix cache hits",
                "Prompt tokens served from the prefix cache over all prompt tokens (5 m), and"
                " the scheduler's last hit rate.",
                "percentunit",
                (
                    Query(f"instance:sglang_cache_hit:ratio_rate5m{{{SEL}}}", "{{instance}} 5 m"),
                    Query(
                        f"max by (instance) (sglang:cache_hit_rate{{{SEL}}})", "{{instance}} last"
                    ),
                ),
            ),
        ),
    ),
    (
        "Requests",
        (
            PanelSpec(
                "timeseries",
                "Requests/s by status",
                "Answers of the generation endpoints (/generate, /v1/...) per second, by HTTP"
                " status (sglang's HTTP metrics).",
                "reqps",
                (Query(rate(ANSWERS, "instance, status_code"), "{{instance}} {{status_code}}"),),
            ),
            PanelSpec(
                "timeseries",
                "Error rate (5xx)",
                "The share of the generation endpoints' answers that are 5xx (monitoring.errors"
                " is its objective).",
                "percentunit",
                (
                    Query(
                        f"({rate(ERRORS)} or 0 * {rate(ANSWERS)}) / {rate(ANSWERS)}",
                        "{{instance}}",
                    ),
                ),
            ),
            PanelSpec(
                "timeseries",
                "End-to-end latency",
                "Percentiles of a request's time from arrival to its last token.",
                "s",
                percentiles("e2e_request_latency_seconds"),
            ),
            PanelSpec(
                "timeseries",
                "Queue time",
                "Percentiles of the time a request waits before its prefill.",
                "s",
                percentiles("queue_time_seconds"),
            ),
            PanelSpec(
                "timeseries",
                "Objectives: share of bad events (1 h)",
                "Per objective of monitoring: (the rules' instance:glm5svc_slo_errors:"
                "ratio_rate1h); an objective's budget is 1 - its target.",
                "percentunit",
                (
                    Query(
                        f"instance:glm5svc_slo_errors:ratio_rate1h{{{SEL}}}",
                        "{{instance}} {{slo}}",
                    ),
                ),
                width=16,
            ),
        ),
    ),
    (
        "GPUs",
        (
            PanelSpec(
                "timeseries",
                "Power against the limit",
                "Board power over the enforced power limit, per GPU.",
                "percentunit",
                (
                    Query(
                        f"gpu:glm5svc_gpu_power_share_of_limit:ratio{{{SEL_GPU}}}",
                        "{{instance}} GPU {{gpu}}",
                    ),
                ),
            ),
            PanelSpec(
                "timeseries",
                "Power",
                "Board power and the enforced limit, per GPU.",
                "watt",
                (
                    Query(f"glm5svc_gpu_power_watts{{{SEL_GPU}}}", "{{instance}} GPU {{gpu}}"),
                    Query(
                        f"glm5svc_gpu_power_limit_watts{{{SEL_GPU}}}",
                        "{{instance}} GPU {{gpu}} limit",
                    ),
                ),
            ),
            PanelSpec(
                "timeseries",
                "Clocks",
                "SM and memory clocks, per GPU.",
                "hertz",
                (
                    Query(
                        f"glm5svc_gpu_sm_clock_hertz{{{SEL_GPU}}}", "{{instance}} GPU {{gpu}} SM"
                    ),
                    Query(
                        f"glm5svc_gpu_memory_clock_hertz{{{SEL_GPU}}}",
                        "{{instance}} GPU {{gpu}} memory",
                    ),
                ),
            ),
            PanelSpec(
                "states",
                "Clock limiting reasons",
                "1 while NVML names this reason for clocks below their maximum.",
                "none",
                (
                    Query(
                        f"glm5svc_gpu_clock_event_active{{{SEL_GPU}}}",
                        "{{instance}} GPU {{gpu}} {{reason}}",
                    ),
                ),
                width=12,
            ),
            PanelSpec(
                "timeseries",
                "PCIe",
                "Bytes per second each way, per GPU.",
                "Bps",
                (
                    Query(
                        rate(
                            f"glm5svc_gpu_pcie_bytes_total{{{SEL_GPU}}}", "instance, gpu, direction"
                        ),
                        "{{instance}} GPU {{gpu}} {{direction}}",
                    ),
                ),
                width=12,
            ),
            PanelSpec(
                "timeseries",
                "Memory",
                "Device memory in use and in total, per GPU.",
                "bytes",
                (
                    Query(
                        f"glm5svc_gpu_memory_used_bytes{{{SEL_GPU}}}",
                        "{{instance}} GPU {{gpu}} used",
                    ),
                    Query(
                        f"glm5svc_gpu_memory_total_bytes{{{SEL_GPU}}}",
                        "{{instance}} GPU {{gpu}} total",
                    ),
                ),
            ),
            PanelSpec(
                "timeseries",
                "Utilisation",
                "Time a kernel was running, per GPU.",
                "percentunit",
                (Query(f"glm5svc_gpu_utilization_ratio{{{SEL_GPU}}}", "{{instance}} GPU {{gpu}}"),),
            ),
            PanelSpec(
                "timeseries",
                "Temperature",
                "GPU core temperature.",
                "celsius",
                (
                    Query(
                        f"glm5svc_gpu_temperature_celsius{{{SEL_GPU}}}", "{{instance}} GPU {{gpu}}"
                    ),
                ),
            ),
        ),
    ),
)


# Stat panels whose values are states, in words and colours.
READY = {
    "0": model.ValueMappingResult(text="not ready", color="red", index=0),
    "1": model.ValueMappingResult(text="ready", color="green", index=1),
}
MAPPINGS = {"Ready": [model.ValueMap(options=READY)]}


def _targets(spec: PanelSpec) -> list[prometheus.Dataquery]:
    found = []
    for n, query in enumerate(spec.queries):
        target = prometheus.Dataquery().expr(query.expr).legend_format(query.legend)
        if spec.kind == "heatmap":
            target = target.format(PromQueryFormat.HEATMAP)
        found.append(target.ref_id(chr(65 + n)))
    return found


def _panel(spec: PanelSpec, panel_id: int):
    if spec.kind == "stat":
        panel = (
            stat.Panel()
            .mappings(MAPPINGS.get(spec.title, []))
            .text_mode(
                common.BigValueTextMode.NAME
                if spec.title == "Phase"
                else common.BigValueTextMode.VALUE_AND_NAME
            )
            .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]))
        )
    elif spec.kind == "states":
        panel = statetimeline.Panel().show_value(common.VisibilityMode.NEVER)
    elif spec.kind == "heatmap":
        panel = heatmap.Panel().calculate(False)
    else:
        panel = timeseries.Panel()
    panel = (
        panel.id(panel_id)
        .title(spec.title)
        .description(spec.description)
        .unit(spec.unit)
        .datasource(DATASOURCE)
        .height(8)
        .span(spec.width)
    )
    for target in _targets(spec):
        panel = panel.with_target(target)
    return panel


def _variables():
    source = dashboard.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    instance = (
        dashboard.QueryVariable("instance")
        .label("Instance")
        .datasource(DATASOURCE)
        .query("label_values(glm5svc_ready, instance)")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    gpu = (
        dashboard.QueryVariable("gpu")
        .label("GPU")
        .datasource(DATASOURCE)
        .query('label_values(glm5svc_gpu_info{instance=~"$instance"}, gpu)')
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.NUMERICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    return [source, instance, gpu]


def build() -> dict:
    board = (
        dashboard.Dashboard("glm5svc")
        .uid("glm5svc")
        .description(
            "glm5svc serving GLM-5 on SGLang: the service, the engine and each GPU"
            " (glm5svc/data/monitoring; docs/observability.md)."
        )
        .tags(["glm5svc", "sglang", "gpu"])
        .time("now-1h", "now")
        .refresh("30s")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
    )
    for variable in _variables():
        board = board.with_variable(variable)
    panel_id = 0
    for title, panels in ROWS:
        panel_id += 1
        board = board.with_row(dashboard.Row(title).id(panel_id))
        for spec in panels:
            panel_id += 1
            board = board.with_panel(_panel(spec, panel_id))
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def render() -> str:
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.dashboard", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the JSON would change")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not OUTPUT.exists() or OUTPUT.read_text(encoding="utf-8") != text:
            print(f"{OUTPUT.relative_to(REPO)}: out of date; run `python -m testkit.dashboard`")
            return 1
        return 0
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
