"""Run inside an sglang venv: what api_key does sglang's launcher get from each --config file?

Usage: python merge_config_with_sglang.py '<json list of argv lists>'
Does what sglang.srt.server_args.prepare_server_args does before building ServerArgs:
ConfigArgumentMerger(parser).merge_config_with_args(argv), then parser.parse_args.
Prints a JSON list: for each argv {"api_key": ...} or {"error": "..."}.
"""

import argparse
import json
import sys

from sglang.srt.server_args import ServerArgs

try:  # moved under sglang.srt.utils in 0.5.19
    from sglang.srt.server_args_config_parser import ConfigArgumentMerger
except ImportError:
    from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger


def api_key_for(argv):
    parser = argparse.ArgumentParser(prog="sglang serve", exit_on_error=False)
    ServerArgs.add_cli_args(parser)
    try:
        merged = ConfigArgumentMerger(parser).merge_config_with_args(argv)
        return {"api_key": parser.parse_args(merged).api_key}
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - sglang would not start
        return {"error": f"{type(exc).__name__}: {exc}"}


print(json.dumps([api_key_for(argv) for argv in json.loads(sys.argv[1])]))
