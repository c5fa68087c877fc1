"""Start smg's router (`smg launch`) with the API key taken from the environment.

smg 1.13.0 reads its API key only from `--api-key KEY`, which would show the key in `ps`
and /proc/PID/cmdline. systemd reads the 0600 EnvironmentFile as root and hands the key to
this process in GLM5_GATEWAY_API_KEY; it is removed from the environment and set on smg's
parsed arguments (smg.launch_router.parse_router_args -> RouterArgs.api_key), the same field
`--api-key` fills. Every other argument is passed to smg's own parser unchanged.
"""

import os
import sys

from smg.launch_router import launch_router, parse_router_args

KEY_VARIABLE = "GLM5_GATEWAY_API_KEY"


def main() -> None:
    if any(arg == "--api-key" or arg.startswith("--api-key=") for arg in sys.argv[1:]):
        sys.exit(f"glm5-gateway: give the API key in ${KEY_VARIABLE}, never as --api-key")
    router_args = parse_router_args(sys.argv[1:])
    key = os.environ.pop(KEY_VARIABLE, "").strip()
    router_args.api_key = key or None
    launch_router(router_args)


if __name__ == "__main__":
    main()
