"""Run inside the sglang venv: parse argvs with sglang's real parser (one import for all).

Usage: python parse_with_sglang.py '<json list of argv lists>'
Prints JSON: {"results": [for each argv {"dests": {...}} or {"error": "..."}],
"options": [every option string the parser knows], "dests": {option string: its dest},
"version": sglang's version}.
"""

import argparse
import importlib.metadata
import json
import sys

from sglang.srt.server_args import ServerArgs


def new_parser():
    parser = argparse.ArgumentParser(allow_abbrev=False, exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    return parser


def parse(argv):
    try:
        return {"dests": vars(new_parser().parse_args(argv))}
    except (argparse.ArgumentError, SystemExit) as exc:
        return {"error": str(exc)}


print(
    json.dumps(
        {
            "results": [parse(argv) for argv in json.loads(sys.argv[1])],
            "options": sorted(new_parser()._option_string_actions),
            "dests": {
                name: action.dest for name, action in new_parser()._option_string_actions.items()
            },
            "version": importlib.metadata.version("sglang"),
        },
        default=str,
    )
)
