# Run with the service venv's Python: glm5svc's own model check on one directory, as JSON rows.
import json
import sys
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

from glm5svc.model_check import check_model_directory

path = Path(sys.argv[1])
context = SimpleNamespace(config=SimpleNamespace(model=SimpleNamespace(path=path)))
print(json.dumps([asdict(row) for row in check_model_directory(context)]))
