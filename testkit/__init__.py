"""Test doubles and harnesses shared by the tests, the bench/ scripts, the lab and Molecule.

Not part of the glm5svc wheel (pyproject packages only glm5svc*) and never installed as the
engine. What lives here:

- `sglang_test_engine.py`: the test engine, a stand-in for `python -m sglang.launch_server`
  (a standalone script: the lab and Molecule copy it into containers as one file);
- `engine.py`: start the test engine on a free port and wait for it (`start_engine`);
- `tiny_tokenizer.py`: a script that writes a word-level tokenizer for the stand-in model;
- `bench_venv.py`: the venv with the real sglang 0.5.9 `bench_serving` (built under .cache/);
- `parser_venv.py`, `sglang_wheels.py`, `smg_venv.py`: the other environments built once
  per machine under .cache/ (sglang's real parser per profile, the real wheels the patch
  tests read, SGLang's gateway), each under `build_lock.py`'s lock, all started together
  by `prewarm.py` at the start of a test run;
- `fake_pynvml.py`: a `pynvml` stand-in with scripted devices and the real error classes,
  and `PcieTraffic`, PCIe bytes at scripted rates behind wrapping counters or GPM;
- `fake_gpus.py`: `SteadyGpus`, a time-driven `NvmlSource` for the telemetry sampler;
- `torchvision_stand_in/`: the import-only torchvision the sglang parser venv gets.
"""
