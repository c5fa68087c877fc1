"""Send N distinct /generate requests through the gateway; print the status codes and how
many requests each engine counted meanwhile (from its sglang:num_requests_total).

usage: send_through_gateway.py GATEWAY_URL KEY N ENGINE_URL...
"""

import json
import re
import sys
import urllib.error
import urllib.request


def engine_requests(url: str) -> float:
    with urllib.request.urlopen(url + "/metrics", timeout=5) as response:
        text = response.read().decode()
    return float(re.search(r"^sglang:num_requests_total\{[^}]*\} (\S+)$", text, re.M).group(1))


def send(gateway: str, key: str, index: int) -> int:
    body = {
        "text": f"request {index}: " + "word " * (5 + index),
        "sampling_params": {"max_new_tokens": 4},
    }
    request = urllib.request.Request(
        gateway + "/generate",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            json.loads(response.read())
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def main() -> None:
    gateway, key, count, engines = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
    before = {url: engine_requests(url) for url in engines}
    codes = [send(gateway, key, i) for i in range(count)]
    after = {url: engine_requests(url) for url in engines}
    print(json.dumps({"codes": codes, "per_engine": {u: after[u] - before[u] for u in engines}}))


if __name__ == "__main__":
    main()
