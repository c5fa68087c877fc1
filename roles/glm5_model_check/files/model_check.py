# Run with the service venv's Python: glm5svc's own model check on one directory, as JSON rows
# (for the default target, sm120: an NVFP4 checkpoint with every shard). The context is a real
# PreflightContext over a real Config (model.path set), so the path is validated as
# glm5.yaml's would be; it reads no GPU and no sglang.
import json
import sys
from dataclasses import asdict

from glm5svc.config import config_from_mapping
from glm5svc.errors import Glm5Error
from glm5svc.facts import HostFacts
from glm5svc.preflight.model import check_model_directory
from glm5svc.preflight.rows import PreflightContext

try:
    config = config_from_mapping({"model": {"path": sys.argv[1]}}, source="glm5_model_check_path")
except Glm5Error as exc:
    print(exc.render(), file=sys.stderr)
    sys.exit(exc.exit_status)
facts = HostFacts.given(config, nvml_error="the model check reads no GPU")
context = PreflightContext(config, facts)
print(json.dumps([asdict(row) for row in check_model_directory(context)]))
