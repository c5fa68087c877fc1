"""Prompts of given lengths for one bench_serving run, in its `custom` dataset's format.

Run by glm5svc (glm5svc/bench/request_prompts.py) with the interpreter that runs
sglang.bench_serving, which has transformers:

    python request_prompts.py TOKENIZER SEED LENGTHS_JSON OUT_JSONL

LENGTHS_JSON holds [[input_len, output_len], ...]. Each line of OUT_JSONL is
{"conversations": [{"role": "user", "content": PROMPT}, {"role": "assistant", "content":
COMPLETION}]}: bench_serving's custom dataset (sglang 0.5.9, 0.5.10.post1 and 0.5.11,
`sample_custom_requests`) counts a request's input as len(tokenizer.encode(PROMPT)) and its
output as len(tokenizer.encode(COMPLETION)), and asks for exactly that many new tokens. Both
texts are random tokens of the vocabulary (special tokens left out) from SEED, adjusted
until they encode to the requested lengths. Prints {"requests": N} on success; exits 1
naming the request it could not build.
"""

from __future__ import annotations

import json
import random
import sys

from transformers import AutoTokenizer

TRIES = 20


def main(tokenizer_path: str, seed: str, lengths_path: str, out_path: str) -> int:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, trust_remote_code=True)
    special = set(tokenizer.all_special_ids)
    vocabulary = [i for i in range(tokenizer.vocab_size) if i not in special]
    if not vocabulary:
        print(f"the tokenizer at {tokenizer_path} has no ordinary tokens", file=sys.stderr)
        return 1
    rng = random.Random(int(seed))
    added = len(tokenizer.encode(""))  # what encode() adds (a BOS token, for some)

    def text_of(length: int) -> str | None:
        ids = [rng.choice(vocabulary) for _ in range(max(1, length - added))]
        for _ in range(TRIES):
            text = tokenizer.decode(ids)
            counted = len(tokenizer.encode(text))
            if counted == length:
                return text
            ids = tokenizer.encode(text, add_special_tokens=False) or ids
            if counted > length:
                ids = ids[: max(1, len(ids) - (counted - length))]
            else:
                ids = ids + [rng.choice(vocabulary) for _ in range(length - counted)]
        return None

    with open(lengths_path, encoding="utf-8") as handle:
        lengths = json.load(handle)
    with open(out_path, "w", encoding="utf-8") as out:
        for index, (input_len, output_len) in enumerate(lengths):
            prompt, completion = text_of(input_len), text_of(output_len)
            if prompt is None or completion is None:
                which = "input" if prompt is None else "output"
                print(
                    f"request {index + 1}: no text of {input_len if prompt is None else output_len}"
                    f" tokens for its {which} with the tokenizer at {tokenizer_path}",
                    file=sys.stderr,
                )
                return 1
            row = {
                "conversations": [
                    {"role": "user", "content": prompt},
                    {"role": "assistant", "content": completion},
                ]
            }
            out.write(json.dumps(row) + "\n")
    print(json.dumps({"requests": len(lengths)}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(*sys.argv[1:]))
