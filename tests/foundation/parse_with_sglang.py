"""Run inside the sglang venv: parse argvs with sglang's real parser (one import for all).

Usage: python parse_with_sglang.py '<json list of argv lists>'
Prints a JSON list: for each argv, {"dests": {...}} or {"error": "..."}.
"""

import argparse
import json
import sys

from sglang.srt.server_args import ServerArgs


def parse(argv):
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    try:
        return {"dests": vars(parser.parse_args(argv))}
    except (argparse.ArgumentError, SystemExit) as exc:
        return {"error": str(exc)}


print(json.dumps([parse(argv) for argv in json.loads(sys.argv[1])], default=str))
