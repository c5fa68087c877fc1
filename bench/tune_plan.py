"""The tune's plan (glm5svc/tune/estimate.py, the model `tune run --plan` prints) for the
real target and for the H200 testbed, from their figures.

- GLM-5-NVFP4 on 8x RTX PRO 6000 (SM120): the default space (glm5svc/data/tune-space.yaml,
  SM120 values, a MoE model) at concurrency 256, the configuration's windows and warm-up
  bound, the weights read at 2 GB/s with the container's default memory limit (the page
  cache cannot keep them), FlashInfer's MoE autotune without its cache file, over 8 hours:
  glm5svc/tune/reference.py, the figures the docs quote (glm5svc/doc_figures.py).
- The H200 testbed of the GPU lab (lab/gpu/tune_scenario.py, the small-effect space): two
  caps live, mem_fraction_static 0.50/0.55, 10 s windows (the precision curve's choice),
  4 s settle, 40 s warm-up bound, dummy weights, a cold machine's start (READY 168 s under
  serve, 2026-12-04), the 500 s budget the device run gave (docs/performance-tune.md).

    .venv/bin/python bench/tune_plan.py [--short]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from glm5svc.tune.estimate import EstimateInputs, KnobCount, estimate  # noqa: E402
from glm5svc.tune.reference import target_inputs  # noqa: E402

GLM5 = target_inputs(budget_s=8 * 3600)
H200 = EstimateInputs(
    knobs=(
        KnobCount("tuning.max_running_requests", 2, restart=False),
        KnobCount("tuning.mem_fraction_static", 2),
    ),
    budget_s=500,
    window_s=10,
    repeats=2,
    settle_s=4,
    warmup_max_s=40,
    measured_start_s=168,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", action="store_true", help="the same (it is instant)")
    parser.parse_args()
    for name, inputs in (("GLM-5-NVFP4, 8x RTX PRO 6000, one night", GLM5),
                         ("the H200 testbed", H200)):  # fmt: skip
        plan = estimate(inputs)
        print(f"== {name}")
        for line in plan.lines():
            print(line)
        kept = ", ".join(plan.kept)
        print(f"searched: {kept}; total {plan.total_s:,.0f} s of a {plan.budget_s:,.0f} s budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
