"""A tiny word-level tokenizer that AutoTokenizer loads offline: the stand-in model's, for
the bench tests and the lab. Vocabulary: the test engine's words and w0..w151923, Qwen3's
size (151,936, as the GPU lab's testbed has). bench_serving's random-ids prompts are
consecutive ids from a random start, so two prompts of a run collide whole with chance
1/vocabulary: about n / (2 x vocabulary) of a run's n prompts' tokens are cache hits. With
50,000 words the lab's bench at concurrency 32 came out 1.3 % cached, over the 1 % the
steady measurement allows; a vocabulary of 512 made about 7 %.

Run with an interpreter that has transformers: python tiny_tokenizer.py <directory>.
"""

import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

words = ["[UNK]", "[PAD]"] + ["Paris", "is", "the", "capital", "of", "France", ".", "It",
         "has", "a"] + [f"w{i}" for i in range(151936 - 12)]  # fmt: skip
vocab = {w: i for i, w in enumerate(words)}
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece()  # joins word tokens with spaces
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]")
fast.save_pretrained(sys.argv[1])
