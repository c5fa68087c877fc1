"""Run inside the sglang venv: parse argv with sglang's real parser, print dests as JSON.

Usage: python parse_with_sglang.py '<json list of args>'
"""

import argparse
import json
import sys

from sglang.srt.server_args import ServerArgs

parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
ServerArgs.add_cli_args(parser)
try:
    namespace = parser.parse_args(json.loads(sys.argv[1]))
except (argparse.ArgumentError, SystemExit) as exc:
    print(json.dumps({"error": str(exc)}))
    sys.exit(2)
print(json.dumps({k: v for k, v in vars(namespace).items()}, default=str))
