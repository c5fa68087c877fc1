"""`glm5svc preflight`: every check of what the reference deployment tripped on, with its fix.

One module per concern, all returning rows (glm5svc.preflight.rows); `run` runs them in
order over the host's facts, read once (glm5svc.facts):

| module | rows |
|---|---|
| `gpu` | driver, GPU count, compute capability, processes holding GPUs, nvidia_uvm |
| `topology` | links and P2P per pair of GPUs, NCCL's transport |
| `stack` | CUDA toolkit, the installed sglang against the profile, the patches |
| `model` | the checkpoint: config.json, the quantization the plan passes, shards |
| `limits` | the server's open-file and memlock limits |
| `container` | CPUs, memory, the container's rlimits, NUMA placement |
| `service` | ports, exposure without a key, the last run |
| `disk` | free space for caches and results |
"""
