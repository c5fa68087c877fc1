"""One level's result and a whole run's summary: the data every output is made from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from glm5svc.bench.power import LevelTelemetry, unavailable
from glm5svc.bench.serving_figures import LevelMetrics
from glm5svc.records import BenchmarkLevel, BenchmarkStatus

SUMMARY_SCHEMA = "glm5svc.bench.summary/1"


@dataclass
class LevelResult:
    concurrency: int
    requested: int
    metrics: LevelMetrics | None
    telemetry: LevelTelemetry
    returncode: int | None
    wall_s: float
    # "measured-run": the window spans bench_serving's timed run only (after warm-up);
    # "whole-process": markers not seen, so it also spans start-up and warm-up.
    window_scope: str | None = None
    error: str | None = None
    log_file: str | None = None
    # The warm-up and steady windows the figures come from (glm5svc/bench/measure.py).
    steady: dict[str, Any] | None = None

    @property
    def completed(self) -> int:
        return self.metrics.completed if self.metrics else 0

    @property
    def ok(self) -> bool:
        finished = self.returncode == 0 and self.metrics is not None and self.error is None
        return finished and self.completed >= self.requested

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "requested": self.requested,
            "completed": self.completed,
            "ok": self.ok,
            "returncode": self.returncode,
            "wall_s": self.wall_s,
            "window_scope": self.window_scope,
            "error": self.error,
            "log_file": self.log_file,
            "metrics": self.metrics.to_dict() if self.metrics else None,
            "telemetry": self.telemetry.to_dict(),
            "steady": self.steady,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LevelResult:
        metrics = data.get("metrics")
        telemetry = data.get("telemetry")
        return cls(
            concurrency=int(data["concurrency"]),
            requested=int(data["requested"]),
            metrics=LevelMetrics.from_dict(metrics) if metrics else None,
            telemetry=LevelTelemetry.from_dict(telemetry) if telemetry else unavailable("?"),
            returncode=data.get("returncode"),
            wall_s=float(data.get("wall_s") or 0.0),
            window_scope=data.get("window_scope"),
            error=data.get("error"),
            log_file=data.get("log_file"),
            steady=data.get("steady"),
        )


@dataclass
class BenchSummary:
    run_id: str
    kind: str  # "sweep" (glm5svc bench) or "post-start"
    started_at: str
    finished_at: str | None
    plan: dict[str, Any]
    levels: list[LevelResult]
    stopped_reason: str | None  # why the ladder ended early; None if it ran to the end
    telemetry_status: str  # "available" or why not
    verdicts: dict[str, Any] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)
    results_dir: str | None = None

    @property
    def completed_ladder(self) -> bool:
        return self.stopped_reason is None

    @property
    def below_baseline(self) -> bool:
        """True when the baseline comparison flagged a regression (the service's degraded)."""
        return bool(self.verdicts.get("baseline", {}).get("regressed"))

    def level(self, concurrency: int) -> LevelResult | None:
        return next((lv for lv in self.levels if lv.concurrency == concurrency), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SUMMARY_SCHEMA,
            "run_id": self.run_id,
            "kind": self.kind,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "results_dir": self.results_dir,
            "stopped_reason": self.stopped_reason,
            "telemetry_status": self.telemetry_status,
            "plan": self.plan,
            "provenance": self.provenance,
            "verdicts": self.verdicts,
            "levels": [lv.to_dict() for lv in self.levels],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BenchSummary:
        if data.get("schema") != SUMMARY_SCHEMA:
            raise ValueError(f"not a glm5svc bench summary (schema {data.get('schema')!r})")
        return cls(
            run_id=data["run_id"],
            kind=data.get("kind", "sweep"),
            started_at=data["started_at"],
            finished_at=data.get("finished_at"),
            plan=data.get("plan", {}),
            levels=[LevelResult.from_dict(lv) for lv in data.get("levels", [])],
            stopped_reason=data.get("stopped_reason"),
            telemetry_status=data.get("telemetry_status", "unknown"),
            verdicts=data.get("verdicts", {}),
            provenance=data.get("provenance", {}),
            results_dir=data.get("results_dir"),
        )

    def to_status(self) -> BenchmarkStatus:
        """A compact view for the service's /status."""
        knee = self.verdicts.get("knee") or {}
        underused = self.verdicts.get("underused") or {}
        baseline = self.verdicts.get("baseline") or {}
        return BenchmarkStatus(
            run_id=self.run_id,
            kind=self.kind,
            started_at=self.started_at,
            finished_at=self.finished_at,
            results_dir=self.results_dir,
            complete=self.completed_ladder,
            stopped_reason=self.stopped_reason,
            telemetry=self.telemetry_status,
            below_baseline=self.below_baseline,
            baseline=baseline.get("name"),
            knee_concurrency=knee.get("concurrency"),
            gpus_underused=underused.get("underused"),
            levels=tuple(_status_level(lv, baseline) for lv in self.levels),
        )


def _status_level(level: LevelResult, baseline: dict[str, Any]) -> BenchmarkLevel:
    m = level.metrics
    change = next(
        (
            row["change_pct"]
            for row in baseline.get("rows", [])
            if row["concurrency"] == level.concurrency and row["metric"] == "total_throughput"
        ),
        None,
    )
    return BenchmarkLevel(
        concurrency=level.concurrency,
        completed=level.completed,
        requested=level.requested,
        total_tok_s=m.total_throughput if m else None,
        output_tok_s=m.output_throughput if m else None,
        request_per_s=m.request_throughput if m else None,
        median_ttft_ms=m.latency("ttft") if m else None,
        median_itl_ms=m.latency("itl") if m else None,
        joules_per_output_token=level.telemetry.joules_per_output_token,
        mean_power_share=level.telemetry.mean_power_share,
        vs_baseline_pct=change,
    )
