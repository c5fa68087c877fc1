# Run with the service venv's Python: glm5svc's own model check on one directory, as JSON rows
# (for the default target, sm120: an NVFP4 checkpoint with every shard).
import json
import sys
from dataclasses import asdict

from glm5svc.checks import PreflightContext
from glm5svc.config import config_from_mapping
from glm5svc.model_check import check_model_directory

config = config_from_mapping({"model": {"path": sys.argv[1]}})
context = PreflightContext(config, None, "not read: model check only")
print(json.dumps([asdict(row) for row in check_model_directory(context)]))
