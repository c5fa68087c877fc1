"""The docs' time and size figures come from the code (glm5svc/doc_figures.py): a page
holds each between markers (docgen writes them; test_docgen fails on drift), no page types
the weights' size outside them, the pages that quote one figure agree, and a plan without
the weights says it leaves their load out."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from glm5svc.cli import main
from glm5svc.doc_figures import MARKER, UnknownFigure, figures, names_in, render
from glm5svc.night.plan import plan_lines
from glm5svc.tune.estimate import GIB, estimate
from glm5svc.tune.reference import CONTAINER_MEMORY_BYTES, target_inputs

REPO = Path(__file__).resolve().parents[2]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
# A size in the weights' range (GLM-5-NVFP4's, and the limit that caches them), or the
# memory limit spelt for `pct set`.
TYPED = re.compile(r"\b4[0-4]\d (?:GB|GiB)\b(?!/s)|--memory \d+")


def test_every_marker_names_a_figure_and_an_unknown_one_is_refused():
    known = figures()
    used = {name for page in PAGES for name in names_in(page.read_text())}
    assert used and used <= set(known)
    assert {"weights_gb", "night_tune_budget", "target_start"} <= used
    with pytest.raises(UnknownFigure, match="no_such -->: no such figure in"):
        render("a <!-- figure:no_such -->x<!-- /figure --> b")


def test_render_fills_a_marker_from_the_code():
    said = render("weights <!-- figure:weights_gb -->typed by hand<!-- /figure -->.")
    assert said == f"weights <!-- figure:weights_gb -->{figures()['weights_gb']()}<!-- /figure -->."


def test_no_page_types_the_weights_size_outside_a_marker():
    for page in PAGES:
        text = MARKER.sub("", page.read_text())
        typed = TYPED.findall(text)
        assert not typed, f"{page.relative_to(REPO)}: {typed}: quote it with a figure marker"


def test_no_marker_sits_inside_a_code_span():
    """Markdown shows a comment inside backticks as text: a figure there has its own."""
    fence = re.compile(r"^ *```.*?^ *```", re.M | re.S)
    for page in PAGES:
        text = fence.sub("", page.read_text())
        inside = [span for span in re.findall(r"`[^`]*`", text) if MARKER.search(span)]
        assert not inside, f"{page.relative_to(REPO)}: {inside}"


def test_operations_and_performance_tune_quote_the_same_night():
    quoted: dict[str, set[str]] = {}
    for page in ("operations.md", "performance-tune.md"):
        for match in MARKER.finditer((REPO / "docs" / page).read_text()):
            quoted.setdefault(match.group(2), set()).add(match.group(3))
    for name in ("night_tune_budget", "night_restart", "night_bench", "weights_gb"):
        assert len(quoted[name]) == 1, (name, quoted[name])


def test_the_containers_memory_is_the_host_plays_default():
    defaults = yaml.safe_load(
        (REPO / "roles" / "glm5_host_lxc_resources" / "defaults" / "main.yml").read_text()
    )
    assert defaults["glm5_host_lxc_resources_memory_mb"] * 2**20 == CONTAINER_MEMORY_BYTES


@pytest.mark.parametrize(
    ("changes", "left_out"),
    [
        ({"weights_bytes": None, "weights_note": "no safetensors index or shards in /m"},
         "no safetensors index or shards in /m"),
        ({"disk_read_bps": None}, "the disk's read speed is not known"),
    ],
)  # fmt: skip
def test_a_plan_without_the_weights_says_their_load_is_left_out(changes, left_out):
    inputs = replace(target_inputs(8 * 3600), **changes)
    plan = estimate(inputs)
    assert f"the weights' load left out: {left_out}" in plan.start_basis
    assert "GB of weights" not in plan.start_basis
    night = {"budget_s": 28800, "bench_s": 3600, "restart_s": round(plan.start_s),
             "tune_budget_s": 20000, "tune": plan.to_dict(), "dropped": []}  # fmt: skip
    lines = plan_lines(night, 3)
    assert any(line.startswith("  a start: ") and left_out in line for line in lines)
    with_weights = estimate(target_inputs(8 * 3600))
    assert "left out" not in with_weights.start_basis
    assert with_weights.start_s > plan.start_s


def test_the_cache_limit_is_the_weights_and_the_engines_memory_in_gib():
    gib = int(figures()["cache_limit_gib"]().split()[0])
    weights_gib = float(figures()["weights_gib"]().split()[0])
    assert gib * GIB >= target_inputs(1).weights_bytes and gib > weights_gib
    assert figures()["pct_set_memory"]() == f"`pct set <id> --memory {gib * 1024}`"


def test_tune_run_plan_without_the_weights_says_so(tmp_path, capsys):
    config = tmp_path / "glm5.yaml"
    config.write_text(json.dumps({"model": {"path": str(tmp_path / "no-weights")}}))
    assert main(["--config", str(config), "tune", "run", "--plan", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    left_out = f"the weights' load left out: no safetensors index or shards in {tmp_path}"
    assert left_out in plan["start_basis"]
